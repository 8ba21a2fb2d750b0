// Image classification: a registered model over images, cross-entropy (with label smoothing),
// accuracy and top-k accuracy; at test time a confusion matrix, per-class accuracy and macro-F1.
#include "absl/strings/str_cat.h"
#include "components/models/model.h"
#include "tasks/confusion_matrix.h"
#include "lib/registry/registry.h"
#include "lib/trainer/task.h"

namespace kiln {
namespace {

class ImageClassification : public Task {
 public:
  ImageClassification(int64_t num_classes, double label_smoothing, int64_t top_k)
      : num_classes_(num_classes),
        label_smoothing_(label_smoothing),
        top_k_(top_k),
        confusion_(num_classes) {}

  absl::Status Build(const config::Config& job) override {
    KILN_ASSIGN_OR_RETURN(config::Config model_cfg, job.Sub("model"));
    KILN_ASSIGN_OR_RETURN(model_, Registry<Model>::Get().Instantiate(model_cfg));
    return absl::OkStatus();
  }

  torch::nn::Module& module() override { return *model_; }

  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) override {
    torch::Tensor logits = model_->forward(batch.input);
    KILN_RETURN_IF_ERROR(CheckLogits(logits, batch));
    torch::Tensor loss = ClassificationLoss(logits, batch.target, label_smoothing_);
    double n = static_cast<double>(batch.size());
    log.Log("train/loss", loss.item<double>(), n);
    log.Log("train/acc", TopKAccuracy(logits, batch.target, 1), n);
    return loss;
  }

  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage, MetricLog& log) override {
    torch::Tensor logits = model_->forward(batch.input);
    KILN_RETURN_IF_ERROR(CheckLogits(logits, batch));
    double n = static_cast<double>(batch.size());
    log.Log(stage + "/loss", ClassificationLoss(logits, batch.target, label_smoothing_).item<double>(), n);
    log.Log(stage + "/acc", TopKAccuracy(logits, batch.target, 1), n);
    if (top_k_ > 1 && top_k_ < num_classes_) {
      log.Log(absl::StrCat(stage, "/acc_top", top_k_), TopKAccuracy(logits, batch.target, top_k_), n);
    }
    if (stage == "test") {
      confusion_.Add(batch.target, logits);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, double>> TestReport(const std::string& output_dir,
                                                          const std::vector<std::string>& class_names) override {
    return confusion_.Report(output_dir, class_names);
  }

  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) override {
    return torch::softmax(model_->forward(batch.input).to(torch::kFloat32), 1);
  }

 private:
  absl::Status CheckLogits(const torch::Tensor& logits, const data::Batch& batch) const {
    if (logits.dim() != 2 || logits.size(1) != num_classes_) {
      return absl::InvalidArgumentError(absl::StrCat("the model outputs ", c10::str(logits.sizes()),
                                                     " for a batch of ", batch.size(), ", but task.num_classes=",
                                                     num_classes_));
    }
    return absl::OkStatus();
  }

  int64_t num_classes_;
  double label_smoothing_;
  int64_t top_k_;
  ConfusionMatrix confusion_;
  std::shared_ptr<Model> model_;
};

KILN_REGISTER(Task, "image_classification",
              "Classify images: cross-entropy, accuracy, top-k accuracy; confusion matrix at test time",
              OptionSchema()
                  .Required("num_classes", OptionType::kInt, "number of classes")
                  .Float("label_smoothing", 0.0, "cross-entropy label smoothing in [0, 1)")
                  .Int("top_k", 5, "also report top-k accuracy (when k < num_classes)"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Task>> {
                KILN_ASSIGN_OR_RETURN(int64_t classes, cfg.Get<int64_t>("num_classes"));
                KILN_ASSIGN_OR_RETURN(double smoothing, cfg.Get<double>("label_smoothing"));
                KILN_ASSIGN_OR_RETURN(int64_t top_k, cfg.Get<int64_t>("top_k"));
                if (classes < 2) {
                  return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("num_classes"),
                                                                 "' must be at least 2"));
                }
                if (smoothing < 0 || smoothing >= 1) {
                  return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("label_smoothing"),
                                                                 "' must be in [0, 1)"));
                }
                return std::make_shared<ImageClassification>(classes, smoothing, top_k);
              });

}  // namespace
}  // namespace kiln
