// Keyword spotting: a registered model over speech features [B, frames, F] classifies a clip as
// one of the keywords or a filler class (unknown word, silence). Cross-entropy (with label
// smoothing), accuracy, and the two errors that matter to a spotter: the false-accept rate (filler
// clips taken for a keyword) and the miss rate (keyword clips taken for filler); at test time a
// confusion matrix, per-class accuracy and macro-F1. `kiln predict` labels audio files.
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/models/model.h"
#include "lib/core/status_macros.h"
#include "lib/registry/registry.h"
#include "lib/trainer/task.h"
#include "tasks/confusion_matrix.h"

namespace kiln {
namespace {

class KeywordSpotting : public Task {
 public:
  KeywordSpotting(int64_t num_classes, double label_smoothing, std::vector<std::string> fillers)
      : num_classes_(num_classes),
        label_smoothing_(label_smoothing),
        fillers_(std::move(fillers)),
        confusion_(num_classes) {}

  absl::Status Build(const config::Config& job) override {
    KILN_ASSIGN_OR_RETURN(config::Config model_cfg, job.Sub("model"));
    KILN_ASSIGN_OR_RETURN(model_, Registry<Model>::Get().Instantiate(model_cfg));
    return absl::OkStatus();
  }

  torch::nn::Module& module() override { return *model_; }

  // The class names decide which classes are filler; they must match num_classes.
  absl::Status Connect(data::DataModule& data) override {
    KILN_RETURN_IF_ERROR(data.PrepareData());
    std::vector<std::string> names = data.class_names();
    if (names.empty()) return absl::OkStatus();
    if (static_cast<int64_t>(names.size()) != num_classes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("task.num_classes is ", num_classes_, " but the data has ", names.size(),
                       " classes (", absl::StrJoin(names, ", "), ")"));
    }
    std::vector<float> filler(names.size(), 0.0f);
    for (const std::string& f : fillers_) {
      auto it = std::find(names.begin(), names.end(), f);
      if (it == names.end()) {
        return absl::InvalidArgumentError(absl::StrCat("task.filler_classes names '", f,
                                                       "', which is not a class (",
                                                       absl::StrJoin(names, ", "), ")"));
      }
      filler[static_cast<size_t>(it - names.begin())] = 1.0f;
    }
    is_filler_ = torch::tensor(filler).to(torch::kBool);
    return absl::OkStatus();
  }

  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    torch::Tensor loss = ClassificationLoss(logits, batch.target, label_smoothing_);
    double n = static_cast<double>(batch.size());
    log.Log("train/loss", loss.item<double>(), n);
    log.Log("train/acc", TopKAccuracy(logits, batch.target), n);
    return loss;
  }

  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    torch::Tensor predicted = logits.argmax(1);
    double n = static_cast<double>(batch.size());
    log.Log(stage + "/loss", ClassificationLoss(logits, batch.target, label_smoothing_).item<double>(), n);
    log.Log(stage + "/acc", TopKAccuracy(logits, batch.target), n);
    if (is_filler_.defined() && is_filler_.any().item<bool>()) {
      torch::Tensor true_filler = is_filler_.index_select(0, batch.target);
      torch::Tensor said_filler = is_filler_.index_select(0, predicted);
      int64_t fillers = true_filler.sum().item<int64_t>(), keywords = batch.size() - fillers;
      // A filler clip taken for any keyword is a false accept; a keyword clip taken for filler a
      // miss.
      if (fillers > 0) {
        double accepted = (true_filler & ~said_filler).sum().item<double>();
        log.Log(stage + "/false_accept_rate", accepted / static_cast<double>(fillers),
                static_cast<double>(fillers));
      }
      if (keywords > 0) {
        double missed = (~true_filler & said_filler).sum().item<double>();
        log.Log(stage + "/miss_rate", missed / static_cast<double>(keywords),
                static_cast<double>(keywords));
      }
    }
    if (stage == "test") confusion_.Add(batch.target, logits);
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, double>> TestReport(
      const std::string& output_dir, const std::vector<std::string>& class_names) override {
    return confusion_.Report(output_dir, class_names);
  }

  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    return torch::softmax(logits.to(torch::kFloat32), 1);
  }

 private:
  absl::StatusOr<torch::Tensor> Logits(const data::Batch& batch) {
    if (batch.input.dim() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("keyword_spotting expects features [batch, frames, features], got ",
                       c10::str(batch.input.sizes()), " (use an audio data module: audio_folder)"));
    }
    torch::Tensor logits = model_->forward(batch.input);
    if (logits.dim() != 2 || logits.size(1) != num_classes_) {
      return absl::InvalidArgumentError(absl::StrCat("the model outputs ", c10::str(logits.sizes()),
                                                     " for a batch of ", batch.size(),
                                                     ", but task.num_classes=", num_classes_));
    }
    return logits;
  }

  int64_t num_classes_;
  double label_smoothing_;
  std::vector<std::string> fillers_;
  torch::Tensor is_filler_;  // bool [num_classes]
  ConfusionMatrix confusion_;
  std::shared_ptr<Model> model_;
};

KILN_REGISTER(
    Task, "keyword_spotting",
    "Spot keywords in audio clips: cross-entropy, accuracy, false-accept and miss rates; confusion "
    "matrix at test time",
    OptionSchema()
        .Required("num_classes", OptionType::kInt,
                  "number of classes (keywords and filler classes)")
        .Float("label_smoothing", 0.0, "cross-entropy label smoothing in [0, 1)")
        .Add("filler_classes", OptionType::kList, "[unknown, silence]",
             "classes that are not keywords (for the false-accept and miss rates); [] for none"),
    [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Task>> {
      KILN_ASSIGN_OR_RETURN(int64_t classes, cfg.Get<int64_t>("num_classes"));
      KILN_ASSIGN_OR_RETURN(double smoothing, cfg.Get<double>("label_smoothing"));
      KILN_ASSIGN_OR_RETURN(auto fillers,
                            cfg.GetOr<std::vector<std::string>>("filler_classes", {}));
      if (classes < 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("option '", cfg.FullKey("num_classes"), "' must be at least 2"));
      }
      if (smoothing < 0 || smoothing >= 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("option '", cfg.FullKey("label_smoothing"), "' must be in [0, 1)"));
      }
      return std::make_shared<KeywordSpotting>(classes, smoothing, std::move(fillers));
    });

}  // namespace
}  // namespace kiln
