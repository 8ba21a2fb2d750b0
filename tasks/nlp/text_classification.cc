// Text classification: a registered text model over padded token ids, cross-entropy (with label
// smoothing), accuracy; at test time a confusion matrix, per-class accuracy and macro-F1.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/models/model.h"
#include "lib/core/status_macros.h"
#include "lib/registry/registry.h"
#include "lib/trainer/task.h"
#include "tasks/confusion_matrix.h"
#include "tasks/nlp/tokenizer_binding.h"

namespace kiln {
namespace {

class TextClassification : public Task {
 public:
  TextClassification(int64_t num_classes, double label_smoothing)
      : num_classes_(num_classes), label_smoothing_(label_smoothing), confusion_(num_classes) {}

  absl::Status Build(const config::Config& job) override {
    KILN_ASSIGN_OR_RETURN(model_, binding_.BuildModel(job, "vocab_size"));
    return absl::OkStatus();
  }

  torch::nn::Module& module() override { return *model_; }

  absl::Status Connect(data::DataModule& data) override {
    KILN_RETURN_IF_ERROR(binding_.Connect(data, "text_classification"));
    // The label set is known once the training split is read (Setup), so it is checked there.
    KILN_RETURN_IF_ERROR(data.Setup(data::Stage::kFit));
    std::vector<std::string> names = data.class_names();
    if (!names.empty() && static_cast<int64_t>(names.size()) != num_classes_) {
      return absl::InvalidArgumentError(absl::StrCat("task.num_classes is ", num_classes_,
                                                     " but the data has ", names.size(),
                                                     " labels (", absl::StrJoin(names, ", "), ")"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    torch::Tensor logits = model_->forward(batch.input);
    torch::Tensor loss = ClassificationLoss(logits, batch.target, label_smoothing_);
    double n = static_cast<double>(batch.size());
    log.Log("train/loss", loss.item<double>(), n);
    log.Log("train/acc", TopKAccuracy(logits, batch.target), n);
    return loss;
  }

  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    torch::Tensor logits = model_->forward(batch.input);
    double n = static_cast<double>(batch.size());
    log.Log(stage + "/loss", ClassificationLoss(logits, batch.target, label_smoothing_).item<double>(), n);
    log.Log(stage + "/acc", TopKAccuracy(logits, batch.target), n);
    if (stage == "test") confusion_.Add(batch.target, logits);
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, double>> TestReport(
      const std::string& output_dir, const std::vector<std::string>& class_names) override {
    return confusion_.Report(output_dir, class_names);
  }

  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    return torch::softmax(model_->forward(batch.input).to(torch::kFloat32), 1);
  }

 private:
  int64_t num_classes_;
  double label_smoothing_;
  ConfusionMatrix confusion_;
  TokenizerBinding binding_;
  std::shared_ptr<Model> model_;
};

KILN_REGISTER(Task, "text_classification",
              "Classify texts: cross-entropy, accuracy; confusion matrix, per-class accuracy and "
              "macro-F1 at test time",
              OptionSchema()
                  .Required("num_classes", OptionType::kInt,
                            "number of classes (the data's labels)")
                  .Float("label_smoothing", 0.0, "cross-entropy label smoothing in [0, 1)"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Task>> {
                KILN_ASSIGN_OR_RETURN(int64_t classes, cfg.Get<int64_t>("num_classes"));
                KILN_ASSIGN_OR_RETURN(double smoothing, cfg.Get<double>("label_smoothing"));
                if (classes < 2) {
                  return absl::InvalidArgumentError(
                      absl::StrCat("option '", cfg.FullKey("num_classes"), "' must be at least 2"));
                }
                if (smoothing < 0 || smoothing >= 1) {
                  return absl::InvalidArgumentError(absl::StrCat(
                      "option '", cfg.FullKey("label_smoothing"), "' must be in [0, 1)"));
                }
                return std::make_shared<TextClassification>(classes, smoothing);
              });

}  // namespace
}  // namespace kiln
