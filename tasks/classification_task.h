// What image, text and keyword classification share: a model that maps a batch to logits
// [batch, num_classes]; a loss (`task.loss`; cross-entropy with label smoothing by default);
// the metrics the config lists (`task.metrics`: accuracy, top-k, per-class accuracy and F1, a
// confusion matrix at test time ...); class probabilities from predict. A classification task
// derives from ClassificationTask and is only what differs: how its model is built, how a batch
// becomes logits, what it takes from or checks in the data. tests/tasks/classification_task_test.cc
// writes a complete one in a few dozen lines.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "components/models/model.h"
#include "lib/registry/options.h"
#include "lib/trainer/loss.h"
#include "lib/trainer/metric_collection.h"
#include "lib/trainer/task.h"

namespace kiln {

struct ClassificationOptions {
  int64_t num_classes = 0;  // required
  double label_smoothing = 0.0;
  config::NodePtr loss;     // null: cross_entropy with label_smoothing
  config::NodePtr metrics;  // null: none
};

// num_classes, label_smoothing, loss and metrics, declared once for every classification task; a
// task adds its own options to the binding it returns. S is the task's options struct, derived
// from ClassificationOptions.
template <typename S>
OptionBinding<S> ClassificationOptionBinding(std::string num_classes_doc) {
  static_assert(std::is_base_of_v<ClassificationOptions, S>);
  return OptionBinding<S>()
      .Required("num_classes", static_cast<int64_t S::*>(&ClassificationOptions::num_classes),
                std::move(num_classes_doc), AtLeast(2))
      .Field("label_smoothing", static_cast<double S::*>(&ClassificationOptions::label_smoothing),
             "cross-entropy label smoothing in [0, 1)", InHalfOpenRange(0, 1))
      .Node("loss", static_cast<config::NodePtr S::*>(&ClassificationOptions::loss),
            OptionType::kMap,
            "the loss, {_target_: LOSS, ...} (null: cross_entropy with label_smoothing)")
      .Node("metrics", static_cast<config::NodePtr S::*>(&ClassificationOptions::metrics),
            OptionType::kMap, kMetricsOptionDoc);
}

class ClassificationTask : public Task {
 public:
  explicit ClassificationTask(const ClassificationOptions& options) : options_(options) {}

  absl::Status Build(const config::Config& job) override;
  torch::nn::Module& module() override { return *model_; }
  std::function<torch::Tensor(const torch::Tensor&)> ModelForward() override {
    return [model = model_](const torch::Tensor& x) { return model->forward(x); };
  }
  absl::Status Connect(data::DataModule& data) final;
  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) final;
  bool splits_training_step() const final { return true; }
  absl::StatusOr<TrainingOutputs> TrainingLoss(const data::Batch& batch) final;
  absl::Status LogTrainingStep(const data::Batch& batch, const TrainingOutputs& outputs,
                               MetricLog& log) final;
  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                              MetricLog& log) final;
  absl::StatusOr<std::map<std::string, double>> EvaluationEnd(
      const std::string& stage, const SumOverRanks& sum_over_ranks) final;
  absl::StatusOr<std::map<std::string, double>> TrainingEpochEnd(
      const SumOverRanks& sum_over_ranks) final;
  absl::StatusOr<std::map<std::string, double>> TestReport(
      const std::string& output_dir, const std::vector<std::string>& class_names) final;
  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) final;

 protected:
  // The model; by default the job's `model` node through Registry<Model>.
  virtual absl::StatusOr<std::shared_ptr<Model>> BuildModel(const config::Config& job);
  // The logits of a batch; by default model(batch.input). The base checks their shape.
  virtual absl::StatusOr<torch::Tensor> Forward(const data::Batch& batch);
  // What the task takes from or checks in the data module (a tokenizer, the class names), when
  // a command connects it.
  virtual absl::Status ConnectData(data::DataModule& /*data*/) { return absl::OkStatus(); }
  // Refuses class names whose count is not num_classes ("task.num_classes is 3 but the data has 4
  // labels (...)"); no names is fine.
  absl::Status CheckClassNames(const std::vector<std::string>& names,
                               const std::string& what) const;

  Model& model() { return *model_; }
  int64_t num_classes() const { return options_.num_classes; }
  // The loss and metrics, once num_classes is known (Build).
  absl::Status BuildLossAndMetrics();

 private:
  absl::StatusOr<torch::Tensor> Logits(const data::Batch& batch);

  ClassificationOptions options_;
  std::shared_ptr<Model> model_;
  std::shared_ptr<Loss> loss_;
  MetricCollection metrics_;
};

}  // namespace kiln
