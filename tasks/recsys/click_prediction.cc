// Click prediction (recommendation ranking): a click model (dlrm) gives one logit per row of
// Criteo-format data; binary cross-entropy with logits is the loss; the metrics the config lists
// (auc, log_loss, normalized_entropy, calibration) are computed over whole epochs, their state
// summed over ranks. Predictions are click probabilities.
#include "absl/strings/str_cat.h"
#include "components/recsys/click_data.h"
#include "components/recsys/click_model.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"
#include "lib/trainer/metric_collection.h"
#include "lib/trainer/task.h"

namespace kiln::recsys {
namespace {

struct ClickPredictionOptions {
  config::NodePtr metrics;  // null: none
};

class ClickPrediction : public Task {
 public:
  explicit ClickPrediction(ClickPredictionOptions o) : o_(std::move(o)) {}

  absl::Status Build(const config::Config& job) override {
    KILN_ASSIGN_OR_RETURN(config::Config model_cfg, job.Sub("model"));
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<Model> model,
                          Registry<Model>::Get().Instantiate(model_cfg));
    model_ = std::dynamic_pointer_cast<ClickModel>(model);
    if (model_ == nullptr) {
      return absl::InvalidArgumentError(
          "task click_prediction needs a click model (model=dlrm): one logit per row of "
          "integer and categorical features");
    }
    return metrics_.Build(o_.metrics, "task.metrics", MetricSetup{});
  }
  torch::nn::Module& module() override { return *model_; }
  std::function<torch::Tensor(const torch::Tensor&)> ModelForward() override {
    return [model = model_](const torch::Tensor& x) { return model->forward(x); };
  }

  // The data's tables must be the model's: the data hashes each category into its table's size.
  absl::Status Connect(data::DataModule& data) override {
    metrics_.Connect(data);
    auto* clicks = dynamic_cast<ClickDataModule*>(&data);
    if (clicks == nullptr) {
      return absl::InvalidArgumentError(
          "task click_prediction needs click data (data=criteo): integer and categorical "
          "features with a 0/1 label");
    }
    const std::vector<int64_t>& data_sizes = clicks->num_embeddings();
    const std::vector<int64_t>& model_sizes = model_->num_embeddings();
    if (data_sizes.size() != model_sizes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("the data has ", data_sizes.size(),
                                                     " categorical features, the model ",
                                                     model_sizes.size(), " tables"));
    }
    for (size_t j = 0; j < data_sizes.size(); ++j) {
      if (data_sizes[j] != model_sizes[j]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "categorical feature C", j + 1, " is hashed into ", data_sizes[j],
            " rows (data.num_embeddings_per_feature) but the model's table has ", model_sizes[j],
            " (model.num_embeddings_per_feature); set both alike (configs/model/dlrm.yaml takes "
            "the data's)"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) override {
    KILN_ASSIGN_OR_RETURN(TrainingOutputs outputs, TrainingLoss(batch));
    KILN_RETURN_IF_ERROR(LogTrainingStep(batch, outputs, log));
    return outputs.loss;
  }
  bool splits_training_step() const override { return true; }
  absl::StatusOr<TrainingOutputs> TrainingLoss(const data::Batch& batch) override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    return TrainingOutputs{Loss(logits, batch), logits.detach()};
  }
  absl::Status LogTrainingStep(const data::Batch& batch, const TrainingOutputs& outputs,
                               MetricLog& log) override {
    log.Log("train/loss", outputs.loss.item<double>(), static_cast<double>(batch.size()));
    return metrics_.Update("train", Scores(outputs.preds, batch), log);
  }
  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    log.Log(stage + "/loss", Loss(logits, batch).item<double>(), static_cast<double>(batch.size()));
    return metrics_.Update(stage, Scores(logits, batch), log);
  }
  absl::StatusOr<std::map<std::string, double>> EvaluationEnd(
      const std::string& stage, const SumOverRanks& sum_over_ranks) override {
    return metrics_.Compute(stage, sum_over_ranks);
  }
  absl::StatusOr<std::map<std::string, double>> TrainingEpochEnd(
      const SumOverRanks& sum_over_ranks) override {
    return metrics_.Compute("train", sum_over_ranks);
  }
  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    return torch::sigmoid(logits.to(torch::kFloat32));
  }
  // One record per row: the click probability.
  absl::StatusOr<std::vector<PredictionRecord>> PredictionRecords(
      const torch::Tensor& output, const std::vector<std::string>& /*class_names*/) override {
    torch::Tensor p = output.reshape({-1}).to(torch::kCPU, torch::kFloat64).contiguous();
    std::vector<PredictionRecord> records;
    for (int64_t i = 0; i < p.size(0); ++i) {
      PredictionRecord record;
      record.fields = {{"probability", config::Node::Float(p.data_ptr<double>()[i])}};
      records.push_back(std::move(record));
    }
    return records;
  }

 private:
  absl::StatusOr<torch::Tensor> Logits(const data::Batch& batch) {
    int64_t features = model_->num_dense() + static_cast<int64_t>(model_->num_embeddings().size());
    if (batch.input.dim() != 2 || batch.input.size(1) != features ||
        batch.input.scalar_type() != torch::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat("click_prediction takes int64 batches [B, ", features,
                       "] (counts, then table indices), "
                       "got ",
                       c10::str(batch.input.scalar_type()), " ", c10::str(batch.input.sizes())));
    }
    return model_->forward(batch.input);
  }
  static torch::Tensor Loss(const torch::Tensor& logits, const data::Batch& batch) {
    return torch::binary_cross_entropy_with_logits(logits.to(torch::kFloat32),
                                                   batch.target.to(torch::kFloat32));
  }
  static MetricBatch Scores(const torch::Tensor& logits, const data::Batch& batch) {
    MetricBatch scores;
    scores.preds = logits.detach();
    scores.target = batch.target;
    return scores;
  }

  ClickPredictionOptions o_;
  std::shared_ptr<ClickModel> model_;
  MetricCollection metrics_;
};

KILN_REGISTER_BOUND(
    Task, "click_prediction",
    "Predict clicks: binary cross-entropy on one logit per row; auc, log_loss, "
    "normalized_entropy and calibration as configured; predictions are click probabilities",
    OptionBinding<ClickPredictionOptions>().Node("metrics", &ClickPredictionOptions::metrics,
                                                 OptionType::kMap, kMetricsOptionDoc),
    [](const ClickPredictionOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
      return std::make_shared<ClickPrediction>(o);
    });

}  // namespace
}  // namespace kiln::recsys
