// Keyword spotting: a registered model over speech features [B, frames, F] classifies a clip as
// one of the keywords or a filler class (unknown word, silence). Loss and metrics as configured
// (configs/task/keyword_spotting.yaml: cross-entropy; accuracy and the two errors that matter to
// a spotter, the false-accept and miss rates over task.filler_classes; at test time a confusion
// matrix, per-class accuracy and macro-F1). `kiln predict` labels audio files. What it adds to
// ClassificationTask: the filler classes must be classes of the data, and the input check.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"
#include "tasks/classification_task.h"

namespace kiln {
namespace {

struct KeywordSpottingOptions : ClassificationOptions {
  std::vector<std::string> filler_classes = {"unknown", "silence"};
};

class KeywordSpotting : public ClassificationTask {
 public:
  explicit KeywordSpotting(const KeywordSpottingOptions& o)
      : ClassificationTask(o), fillers_(o.filler_classes) {}

 protected:
  // The class names must match num_classes and hold the filler classes.
  absl::Status ConnectData(data::DataModule& data) override {
    KILN_RETURN_IF_ERROR(data.PrepareData());
    std::vector<std::string> names = data.class_names();
    if (names.empty()) return absl::OkStatus();
    KILN_RETURN_IF_ERROR(CheckClassNames(names, "classes"));
    for (const std::string& f : fillers_) {
      if (std::find(names.begin(), names.end(), f) == names.end()) {
        return absl::InvalidArgumentError(absl::StrCat("task.filler_classes names '", f,
                                                       "', which is not a class (",
                                                       absl::StrJoin(names, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<torch::Tensor> Forward(const data::Batch& batch) override {
    if (batch.input.dim() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("keyword_spotting expects features [batch, frames, features], got ",
                       c10::str(batch.input.sizes()), " (use an audio data module: audio_folder)"));
    }
    return model().forward(batch.input);
  }

 private:
  std::vector<std::string> fillers_;
};

KILN_REGISTER_BOUND(
    Task, "keyword_spotting",
    "Spot keywords in audio clips: a loss and metrics as configured (cross-entropy; accuracy, "
    "false-accept and miss rates; confusion matrix at test time)",
    ClassificationOptionBinding<KeywordSpottingOptions>(
        "number of classes (keywords and filler classes)")
        .Field("filler_classes", &KeywordSpottingOptions::filler_classes,
               "classes that are not keywords (checked against the data; the false-accept and miss "
               "rates take them as ${task.filler_classes}); [] for none"),
    [](const KeywordSpottingOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
      return std::make_shared<KeywordSpotting>(o);
    });

}  // namespace
}  // namespace kiln
