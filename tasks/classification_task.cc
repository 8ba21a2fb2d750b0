#include "tasks/classification_task.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

// Whether `key` holds the value of the task group's own config file (configs/task/NAME.yaml),
// not one a user or an experiment wrote; or a trained run's stored config (RUN/.hydra/config.yaml,
// a checkpoint's meta/config), which training accepted with this model's head.
bool FromTaskDefaults(const config::Config& job, const std::string& key) {
  std::string where = job.WhereSet(key);
  if (absl::StrContains(where, ".hydra/config.yaml") || absl::StrContains(where, "(meta/config)"))
    return true;
  if (size_t colon = where.rfind(':'); colon != std::string::npos) where.resize(colon);
  const std::string target = job.GetOr<std::string>("task._target_", "").value_or("");
  return !target.empty() && absl::EndsWith(where, "task/" + target + ".yaml");
}

// What the metrics see of a batch: the logits (outside autograd) and the true classes.
MetricBatch Scores(const torch::Tensor& logits, const data::Batch& batch) {
  MetricBatch scores;
  scores.preds = logits.detach();
  scores.target = batch.target;
  return scores;
}

}  // namespace

absl::Status ClassificationTask::Build(const config::Config& job) {
  KILN_ASSIGN_OR_RETURN(model_, BuildModel(job));
  // A pretrained head comes with its classes (config.json's id2label): they decide
  // task.num_classes unless the user wrote another number.
  if (std::vector<std::string> names = model_->class_names();
      !names.empty() && static_cast<int64_t>(names.size()) != options_.num_classes) {
    if (FromTaskDefaults(job, "task.num_classes")) {
      options_.num_classes = static_cast<int64_t>(names.size());
      Logger::Instance().Info(absl::StrCat("task.num_classes=", names.size(),
                                           ": the classes of the model's head (",
                                           absl::StrJoin(names, ", "), ")"));
      return BuildLossAndMetrics();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("task.num_classes is ", options_.num_classes, " but model '",
                     job.GetOr<std::string>("model._target_", "?").value_or("?"),
                     "' has a head for ", names.size(), " classes (", absl::StrJoin(names, ", "),
                     "); set task.num_classes=", names.size()));
  }
  return BuildLossAndMetrics();
}

absl::Status ClassificationTask::BuildLossAndMetrics() {
  if (options_.loss && !options_.loss->is_null()) {
    KILN_ASSIGN_OR_RETURN(
        loss_, Registry<Loss>::Get().Instantiate(config::Config(options_.loss, "task.loss")));
  } else {
    KILN_ASSIGN_OR_RETURN(
        loss_, Registry<Loss>::Get().Instantiate(
                   "cross_entropy", Options().Set("label_smoothing", options_.label_smoothing)));
  }
  return metrics_.Build(options_.metrics, "task.metrics", MetricSetup{options_.num_classes});
}

absl::StatusOr<std::shared_ptr<Model>> ClassificationTask::BuildModel(const config::Config& job) {
  KILN_ASSIGN_OR_RETURN(config::Config model_cfg, job.Sub("model"));
  return Registry<Model>::Get().Instantiate(model_cfg);
}

absl::Status ClassificationTask::Connect(data::DataModule& data) {
  metrics_.Connect(data);
  return ConnectData(data);
}

absl::StatusOr<torch::Tensor> ClassificationTask::Forward(const data::Batch& batch) {
  return model_->forward(batch.input);
}

absl::StatusOr<torch::Tensor> ClassificationTask::Logits(const data::Batch& batch) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Forward(batch));
  if (logits.dim() != 2 || logits.size(1) != options_.num_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model outputs ", c10::str(logits.sizes()), " for a batch of ",
                     batch.size(), ", but task.num_classes=", options_.num_classes));
  }
  return logits;
}

absl::StatusOr<torch::Tensor> ClassificationTask::TrainingStep(const data::Batch& batch,
                                                               MetricLog& log) {
  KILN_ASSIGN_OR_RETURN(TrainingOutputs outputs, TrainingLoss(batch));
  KILN_RETURN_IF_ERROR(LogTrainingStep(batch, outputs, log));
  return outputs.loss;
}

absl::StatusOr<Task::TrainingOutputs> ClassificationTask::TrainingLoss(const data::Batch& batch) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
  torch::Tensor loss = loss_->Forward(logits, batch.target);
  return TrainingOutputs{loss, logits.detach()};
}

absl::Status ClassificationTask::LogTrainingStep(const data::Batch& batch,
                                                 const TrainingOutputs& outputs, MetricLog& log) {
  log.Log("train/loss", outputs.loss.item<double>(), static_cast<double>(batch.size()));
  return metrics_.Update("train", Scores(outputs.preds, batch), log);
}

absl::Status ClassificationTask::EvaluationStep(const data::Batch& batch, const std::string& stage,
                                                MetricLog& log) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
  log.Log(stage + "/loss", loss_->Forward(logits, batch.target).item<double>(),
          static_cast<double>(batch.size()));
  return metrics_.Update(stage, Scores(logits, batch), log);
}

absl::StatusOr<std::map<std::string, double>> ClassificationTask::EvaluationEnd(
    const std::string& stage, const SumOverRanks& sum_over_ranks) {
  return metrics_.Compute(stage, sum_over_ranks);
}

absl::StatusOr<std::map<std::string, double>> ClassificationTask::TrainingEpochEnd(
    const SumOverRanks& sum_over_ranks) {
  return metrics_.Compute("train", sum_over_ranks);
}

absl::StatusOr<std::map<std::string, double>> ClassificationTask::TestReport(
    const std::string& output_dir, const std::vector<std::string>& class_names) {
  KILN_RETURN_IF_ERROR(metrics_.WriteReports("test", output_dir, class_names));
  return std::map<std::string, double>();
}

absl::StatusOr<torch::Tensor> ClassificationTask::PredictStep(const data::Batch& batch) {
  KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
  return torch::softmax(logits.to(torch::kFloat32), 1);
}

absl::Status ClassificationTask::CheckClassNames(const std::vector<std::string>& names,
                                                 const std::string& what) const {
  if (names.empty() || static_cast<int64_t>(names.size()) == options_.num_classes)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("task.num_classes is ", options_.num_classes,
                                                 " but the data has ", names.size(), " ", what,
                                                 " (", absl::StrJoin(names, ", "), ")"));
}

}  // namespace kiln
