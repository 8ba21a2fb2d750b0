// Test-time counts of a classification task (rows: true class, columns: predicted), and the report
// derived from them: the matrix and per-class accuracy as CSV, per-class and macro-averaged F1.
// ClassificationTask (tasks/classification_task.h) keeps one.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int64_t num_classes);
  // target [B] class indices, logits [B, classes].
  void Add(const torch::Tensor& target, const torch::Tensor& logits);
  // Writes test_confusion_matrix.csv and test_per_class_accuracy.csv into `output_dir`, logs a
  // summary, returns test/acc_class/NAME, test/f1_class/NAME and test/f1_macro (the mean F1 over
  // classes that occur or are predicted), and clears the counts. `names` names the classes by
  // index when it has one name per class.
  absl::StatusOr<std::map<std::string, double>> Report(const std::string& output_dir,
                                                       std::vector<std::string> names);

 private:
  int64_t num_classes_;
  torch::Tensor counts_;
};

}  // namespace kiln
