// Image classification: a registered model over images, cross-entropy (with label smoothing),
// accuracy and top-k accuracy; at test time a confusion matrix and per-class accuracy.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "components/models/model.h"
#include "lib/app/run_dir.h"
#include "lib/logging/logger.h"
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
        confusion_(torch::zeros({num_classes, num_classes}, torch::kInt64)) {}

  absl::Status Build(const config::Config& job) override {
    KILN_ASSIGN_OR_RETURN(config::Config model_cfg, job.Sub("model"));
    KILN_ASSIGN_OR_RETURN(model_, Registry<Model>::Get().Instantiate(model_cfg));
    return absl::OkStatus();
  }

  torch::nn::Module& module() override { return *model_; }

  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) override {
    torch::Tensor logits = model_->forward(batch.input);
    KILN_RETURN_IF_ERROR(CheckLogits(logits, batch));
    torch::Tensor loss = Loss(logits, batch.target);
    double n = static_cast<double>(batch.size());
    log.Log("train/loss", loss.item<double>(), n);
    log.Log("train/acc", Accuracy(logits, batch.target, 1), n);
    return loss;
  }

  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage, MetricLog& log) override {
    torch::Tensor logits = model_->forward(batch.input);
    KILN_RETURN_IF_ERROR(CheckLogits(logits, batch));
    double n = static_cast<double>(batch.size());
    log.Log(stage + "/loss", Loss(logits, batch.target).item<double>(), n);
    log.Log(stage + "/acc", Accuracy(logits, batch.target, 1), n);
    if (top_k_ > 1 && top_k_ < num_classes_) {
      log.Log(absl::StrCat(stage, "/acc_top", top_k_), Accuracy(logits, batch.target, top_k_), n);
    }
    if (stage == "test") {
      // Row: true class, column: predicted class.
      torch::Tensor cell = batch.target.to(torch::kCPU) * num_classes_ + logits.argmax(1).to(torch::kCPU);
      confusion_ += torch::bincount(cell, {}, num_classes_ * num_classes_).view({num_classes_, num_classes_});
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, double>> TestReport(const std::string& output_dir,
                                                          const std::vector<std::string>& class_names) override {
    std::vector<std::string> names = class_names;
    if (static_cast<int64_t>(names.size()) != num_classes_) {
      names.clear();
      for (int64_t c = 0; c < num_classes_; ++c) names.push_back(std::to_string(c));
    }
    auto counts = confusion_.accessor<int64_t, 2>();
    std::string matrix = "true/predicted," + absl::StrJoin(names, ",") + "\n";
    std::string per_class = "class,support,correct,accuracy\n";
    std::map<std::string, double> metrics;
    std::vector<std::string> summary;
    for (int64_t t = 0; t < num_classes_; ++t) {
      int64_t support = 0;
      std::vector<std::string> row = {names[static_cast<size_t>(t)]};
      for (int64_t p = 0; p < num_classes_; ++p) {
        support += counts[t][p];
        row.push_back(std::to_string(counts[t][p]));
      }
      matrix += absl::StrJoin(row, ",") + "\n";
      if (support == 0) {
        per_class += absl::StrCat(names[static_cast<size_t>(t)], ",0,0,\n");
        continue;
      }
      double accuracy = static_cast<double>(counts[t][t]) / static_cast<double>(support);
      per_class += absl::StrCat(names[static_cast<size_t>(t)], ",", support, ",", counts[t][t], ",", accuracy, "\n");
      metrics["test/acc_class/" + names[static_cast<size_t>(t)]] = accuracy;
      summary.push_back(absl::StrCat(names[static_cast<size_t>(t)], " ", absl::StrFormat("%.4f", accuracy)));
    }
    confusion_.zero_();
    KILN_RETURN_IF_ERROR(app::MakeDirs(output_dir));
    KILN_RETURN_IF_ERROR(app::WriteFileAtomically(output_dir + "/test_confusion_matrix.csv", matrix));
    KILN_RETURN_IF_ERROR(app::WriteFileAtomically(output_dir + "/test_per_class_accuracy.csv", per_class));
    Logger::Instance().Info(absl::StrCat("test accuracy per class: ", absl::StrJoin(summary, "  "), " (",
                                         output_dir, "/test_confusion_matrix.csv)"));
    return metrics;
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

  torch::Tensor Loss(const torch::Tensor& logits, const torch::Tensor& target) const {
    return torch::nn::functional::cross_entropy(
        logits.to(torch::kFloat32), target,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing_));
  }

  static double Accuracy(const torch::Tensor& logits, const torch::Tensor& target, int64_t k) {
    torch::Tensor top = std::get<1>(logits.topk(k, 1));
    return top.eq(target.unsqueeze(1)).any(1).to(torch::kFloat32).mean().item<double>();
  }

  int64_t num_classes_;
  double label_smoothing_;
  int64_t top_k_;
  torch::Tensor confusion_;  // test-time counts, [true class, predicted class]
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
