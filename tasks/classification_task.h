// What image, text and keyword classification share: a model that maps a batch to logits
// [batch, num_classes]; cross-entropy with label smoothing; accuracy (and top-k accuracy) per
// batch; at test time a confusion matrix, per-class accuracy and macro-F1; class probabilities
// from predict. A classification task derives from ClassificationTask and is only what differs:
// how its model is built, how a batch becomes logits, its checks of the data, its extra metrics.
// tests/tasks/classification_task_test.cc writes a complete one in a few dozen lines.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "components/models/model.h"
#include "lib/registry/options.h"
#include "lib/trainer/task.h"
#include "tasks/confusion_matrix.h"

namespace kiln {

// Cross-entropy of logits [B, classes] (computed in float32) against class indices [B].
torch::Tensor ClassificationLoss(const torch::Tensor& logits, const torch::Tensor& target,
                                 double label_smoothing);
// The share of rows whose target is among the k largest logits (k = 1: plain accuracy).
double TopKAccuracy(const torch::Tensor& logits, const torch::Tensor& target, int64_t k = 1);

struct ClassificationOptions {
  int64_t num_classes = 0;  // required
  double label_smoothing = 0.0;
  int64_t top_k = 0;  // also log top-k accuracy when 1 < k < num_classes
};

// num_classes and label_smoothing, declared once for every classification task; a task adds its
// own options to the binding it returns. S is the task's options struct, derived from
// ClassificationOptions.
template <typename S>
OptionBinding<S> ClassificationOptionBinding(std::string num_classes_doc) {
  static_assert(std::is_base_of_v<ClassificationOptions, S>);
  return OptionBinding<S>()
      .Required("num_classes", static_cast<int64_t S::*>(&ClassificationOptions::num_classes),
                std::move(num_classes_doc), AtLeast(2))
      .Field("label_smoothing", static_cast<double S::*>(&ClassificationOptions::label_smoothing),
             "cross-entropy label smoothing in [0, 1)", InHalfOpenRange(0, 1));
}

class ClassificationTask : public Task {
 public:
  explicit ClassificationTask(const ClassificationOptions& options);

  absl::Status Build(const config::Config& job) override;
  torch::nn::Module& module() override { return *model_; }
  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) final;
  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage, MetricLog& log) final;
  absl::StatusOr<std::map<std::string, double>> TestReport(const std::string& output_dir,
                                                          const std::vector<std::string>& class_names) final;
  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) final;

 protected:
  // The model; by default the job's `model` node through Registry<Model>.
  virtual absl::StatusOr<std::shared_ptr<Model>> BuildModel(const config::Config& job);
  // The logits of a batch; by default model(batch.input). The base checks their shape.
  virtual absl::StatusOr<torch::Tensor> Forward(const data::Batch& batch);
  // Metrics an evaluation batch adds to "<stage>/loss" and "<stage>/acc".
  virtual absl::Status LogMoreMetrics(const torch::Tensor& /*logits*/, const data::Batch& /*batch*/,
                                      const std::string& /*stage*/, MetricLog& /*log*/) {
    return absl::OkStatus();
  }
  // Refuses class names whose count is not num_classes ("task.num_classes is 3 but the data has 4
  // labels (...)"); no names is fine.
  absl::Status CheckClassNames(const std::vector<std::string>& names, const std::string& what) const;

  Model& model() { return *model_; }
  int64_t num_classes() const { return options_.num_classes; }

 private:
  absl::StatusOr<torch::Tensor> Logits(const data::Batch& batch);

  ClassificationOptions options_;
  ConfusionMatrix confusion_;
  std::shared_ptr<Model> model_;
};

}  // namespace kiln
