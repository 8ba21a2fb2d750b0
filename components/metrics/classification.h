// What the classification metrics share: a batch's scores and targets as rows (leading dims
// flattened, masked positions dropped), and counts per (true class, predicted class) for the
// per-class metrics (accuracy by class, F1, the confusion matrix, the keyword spotter's rates).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/trainer/metric.h"

namespace kiln::metrics {

struct Rows {
  torch::Tensor preds;   // [N, classes]
  torch::Tensor target;  // [N] int64
};
// The batch's counted rows; refuses preds that are not [..., classes] over target [...]
// (`metric` names the metric in the message).
absl::StatusOr<Rows> CountedRows(const MetricBatch& batch, const std::string& metric);

// "NAME" of class `index`: its name when `class_names` has one per class, else the index.
std::string ClassName(int64_t index, int64_t num_classes,
                      const std::vector<std::string>& class_names);

// A metric over counts [classes, classes] (rows: true class, columns: predicted), int64 state.
// Needs the task's number of classes.
class ClassCountsMetric : public Metric {
 public:
  using Metric::Metric;
  absl::Status Setup(const MetricSetup& setup) override;
  absl::Status Update(const MetricBatch& batch) override;

 protected:
  virtual const char* name() const = 0;  // the registered name, for messages
  int64_t num_classes() const { return num_classes_; }
  const torch::Tensor& counts() const { return counts_; }
  // Per class: examples of it (support), predictions of it, and the right ones.
  struct PerClass {
    std::vector<int64_t> support, predicted, correct;
  };
  PerClass Tally() const;

 private:
  int64_t num_classes_ = 0;
  torch::Tensor counts_;
};

}  // namespace kiln::metrics
