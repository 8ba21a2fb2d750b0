// Keyword spotting: a registered model over speech features [B, frames, F] classifies a clip as
// one of the keywords or a filler class (unknown word, silence). Cross-entropy (with label
// smoothing), accuracy, and the two errors that matter to a spotter: the false-accept rate (filler
// clips taken for a keyword) and the miss rate (keyword clips taken for filler); at test time a
// confusion matrix, per-class accuracy and macro-F1. `kiln predict` labels audio files. What it
// adds to ClassificationTask: the filler classes and their two rates, and the input check.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/core/status_macros.h"
#include "lib/registry/registry.h"
#include "tasks/classification_task.h"

namespace kiln {
namespace {

struct KeywordSpottingOptions : ClassificationOptions {
  std::vector<std::string> filler_classes = {"unknown", "silence"};
};

class KeywordSpotting : public ClassificationTask {
 public:
  explicit KeywordSpotting(const KeywordSpottingOptions& o) : ClassificationTask(o), fillers_(o.filler_classes) {}

  // The class names decide which classes are filler; they must match num_classes.
  absl::Status Connect(data::DataModule& data) override {
    KILN_RETURN_IF_ERROR(data.PrepareData());
    std::vector<std::string> names = data.class_names();
    if (names.empty()) return absl::OkStatus();
    KILN_RETURN_IF_ERROR(CheckClassNames(names, "classes"));
    std::vector<float> filler(names.size(), 0.0f);
    for (const std::string& f : fillers_) {
      auto it = std::find(names.begin(), names.end(), f);
      if (it == names.end()) {
        return absl::InvalidArgumentError(absl::StrCat("task.filler_classes names '", f, "', which is not a class (",
                                                       absl::StrJoin(names, ", "), ")"));
      }
      filler[static_cast<size_t>(it - names.begin())] = 1.0f;
    }
    is_filler_ = torch::tensor(filler).to(torch::kBool);
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<torch::Tensor> Forward(const data::Batch& batch) override {
    if (batch.input.dim() != 3) {
      return absl::InvalidArgumentError(absl::StrCat("keyword_spotting expects features [batch, frames, features], got ",
                                                     c10::str(batch.input.sizes()),
                                                     " (use an audio data module: audio_folder)"));
    }
    return model().forward(batch.input);
  }

  absl::Status LogMoreMetrics(const torch::Tensor& logits, const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    if (!is_filler_.defined() || !is_filler_.any().item<bool>()) return absl::OkStatus();
    torch::Tensor predicted = logits.argmax(1);
    torch::Tensor true_filler = is_filler_.index_select(0, batch.target);
    torch::Tensor said_filler = is_filler_.index_select(0, predicted);
    int64_t fillers = true_filler.sum().item<int64_t>(), keywords = batch.size() - fillers;
    // A filler clip taken for any keyword is a false accept; a keyword clip taken for filler a miss.
    if (fillers > 0) {
      double accepted = (true_filler & ~said_filler).sum().item<double>();
      log.Log(stage + "/false_accept_rate", accepted / static_cast<double>(fillers), static_cast<double>(fillers));
    }
    if (keywords > 0) {
      double missed = (~true_filler & said_filler).sum().item<double>();
      log.Log(stage + "/miss_rate", missed / static_cast<double>(keywords), static_cast<double>(keywords));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::string> fillers_;
  torch::Tensor is_filler_;  // bool [num_classes]
};

using O = KeywordSpottingOptions;
KILN_REGISTER_BOUND(Task, "keyword_spotting",
                    "Spot keywords in audio clips: cross-entropy, accuracy, false-accept and miss rates; confusion "
                    "matrix at test time",
                    ClassificationOptionBinding<O>("number of classes (keywords and filler classes)")
                        .Field("filler_classes", &O::filler_classes,
                               "classes that are not keywords (for the false-accept and miss rates); [] for none"),
                    [](const O& o) -> absl::StatusOr<std::shared_ptr<Task>> {
                      return std::make_shared<KeywordSpotting>(o);
                    });

}  // namespace
}  // namespace kiln
