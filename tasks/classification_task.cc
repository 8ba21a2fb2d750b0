#include "tasks/classification_task.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/core/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln {

torch::Tensor ClassificationLoss(const torch::Tensor& logits, const torch::Tensor& target,
                                 double label_smoothing) {
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32), target,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
}

double TopKAccuracy(const torch::Tensor& logits, const torch::Tensor& target, int64_t k) {
  if (k == 1) return logits.argmax(1).eq(target).to(torch::kFloat64).mean().item<double>();
  torch::Tensor top = std::get<1>(logits.topk(k, 1));
  return top.eq(target.unsqueeze(1)).any(1).to(torch::kFloat64).mean().item<double>();
}

ClassificationTask::ClassificationTask(const ClassificationOptions& options)
    : options_(options), confusion_(options.num_classes) {}

absl::Status ClassificationTask::Build(const config::Config& job) {
  KILN_ASSIGN_OR_RETURN(model_, BuildModel(job));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Model>> ClassificationTask::BuildModel(const config::Config& job) {
  KILN_ASSIGN_OR_RETURN(config::Config model_cfg, job.Sub("model"));
  return Registry<Model>::Get().Instantiate(model_cfg);
}

absl::StatusOr<torch::Tensor> ClassificationTask::Forward(const data::Batch& batch) {
  return model_->forward(batch.input);
}

absl::StatusOr<torch::Tensor> ClassificationTask::Logits(const data::Batch& batch) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Forward(batch));
  if (logits.dim() != 2 || logits.size(1) != options_.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("the model outputs ", c10::str(logits.sizes()),
                                                   " for a batch of ", batch.size(),
                                                   ", but task.num_classes=", options_.num_classes));
  }
  return logits;
}

absl::StatusOr<torch::Tensor> ClassificationTask::TrainingStep(const data::Batch& batch, MetricLog& log) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
  torch::Tensor loss = ClassificationLoss(logits, batch.target, options_.label_smoothing);
  double n = static_cast<double>(batch.size());
  log.Log("train/loss", loss.item<double>(), n);
  log.Log("train/acc", TopKAccuracy(logits, batch.target, 1), n);
  return loss;
}

absl::Status ClassificationTask::EvaluationStep(const data::Batch& batch, const std::string& stage,
                                                MetricLog& log) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
  double n = static_cast<double>(batch.size());
  log.Log(stage + "/loss", ClassificationLoss(logits, batch.target, options_.label_smoothing).item<double>(), n);
  log.Log(stage + "/acc", TopKAccuracy(logits, batch.target, 1), n);
  int64_t k = options_.top_k;
  if (k > 1 && k < options_.num_classes) {
    log.Log(absl::StrCat(stage, "/acc_top", k), TopKAccuracy(logits, batch.target, k), n);
  }
  KILN_RETURN_IF_ERROR(LogMoreMetrics(logits, batch, stage, log));
  if (stage == "test") confusion_.Add(batch.target, logits);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, double>> ClassificationTask::TestReport(
    const std::string& output_dir, const std::vector<std::string>& class_names) {
  return confusion_.Report(output_dir, class_names);
}

absl::StatusOr<torch::Tensor> ClassificationTask::PredictStep(const data::Batch& batch) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
  return torch::softmax(logits.to(torch::kFloat32), 1);
}

absl::Status ClassificationTask::CheckClassNames(const std::vector<std::string>& names,
                                                 const std::string& what) const {
  if (names.empty() || static_cast<int64_t>(names.size()) == options_.num_classes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("task.num_classes is ", options_.num_classes, " but the data has ",
                                                 names.size(), " ", what, " (", absl::StrJoin(names, ", "), ")"));
}

}  // namespace kiln
