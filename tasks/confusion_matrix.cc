#include "tasks/confusion_matrix.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/core/files.h"
#include "lib/core/status_macros.h"
#include "lib/logging/logger.h"

namespace kiln {

ConfusionMatrix::ConfusionMatrix(int64_t num_classes)
    : num_classes_(num_classes), counts_(torch::zeros({num_classes, num_classes}, torch::kInt64)) {}

void ConfusionMatrix::Add(const torch::Tensor& target, const torch::Tensor& logits) {
  torch::Tensor cell = target.to(torch::kCPU) * num_classes_ + logits.argmax(1).to(torch::kCPU);
  counts_ +=
      torch::bincount(cell, {}, num_classes_ * num_classes_).view({num_classes_, num_classes_});
}

absl::StatusOr<std::map<std::string, double>> ConfusionMatrix::Report(
    const std::string& output_dir, std::vector<std::string> names) {
  if (static_cast<int64_t>(names.size()) != num_classes_) {
    names.clear();
    for (int64_t c = 0; c < num_classes_; ++c) names.push_back(std::to_string(c));
  }
  auto counts = counts_.accessor<int64_t, 2>();
  std::string matrix = "true/predicted," + absl::StrJoin(names, ",") + "\n";
  std::string per_class = "class,support,correct,accuracy\n";
  std::map<std::string, double> metrics;
  std::vector<std::string> summary;
  double f1_sum = 0;
  int64_t f1_classes = 0;
  for (int64_t t = 0; t < num_classes_; ++t) {
    const std::string& name = names[static_cast<size_t>(t)];
    int64_t support = 0, predicted = 0;
    std::vector<std::string> row = {name};
    for (int64_t p = 0; p < num_classes_; ++p) {
      support += counts[t][p];
      predicted += counts[p][t];
      row.push_back(std::to_string(counts[t][p]));
    }
    matrix += absl::StrJoin(row, ",") + "\n";
    if (support + predicted > 0) {
      // F1 = 2 TP / (2 TP + FP + FN); 0 for a class never predicted right.
      double f1 =
          2.0 * static_cast<double>(counts[t][t]) / static_cast<double>(support + predicted);
      metrics["test/f1_class/" + name] = f1;
      f1_sum += f1;
      ++f1_classes;
    }
    if (support == 0) {
      per_class += absl::StrCat(name, ",0,0,\n");
      continue;
    }
    double accuracy = static_cast<double>(counts[t][t]) / static_cast<double>(support);
    per_class += absl::StrCat(name, ",", support, ",", counts[t][t], ",", accuracy, "\n");
    metrics["test/acc_class/" + name] = accuracy;
    summary.push_back(absl::StrCat(name, " ", absl::StrFormat("%.4f", accuracy)));
  }
  if (f1_classes > 0) metrics["test/f1_macro"] = f1_sum / static_cast<double>(f1_classes);
  counts_.zero_();
  KILN_RETURN_IF_ERROR(MakeDirs(output_dir));
  KILN_RETURN_IF_ERROR(WriteFileAtomically(output_dir + "/test_confusion_matrix.csv", matrix));
  KILN_RETURN_IF_ERROR(
      WriteFileAtomically(output_dir + "/test_per_class_accuracy.csv", per_class));
  Logger::Instance().Info(absl::StrCat(
      "test accuracy per class: ", absl::StrJoin(summary, "  "),
      f1_classes > 0 ? absl::StrFormat("; macro-F1 %.4f", metrics["test/f1_macro"]) : "", " (",
      output_dir, "/test_confusion_matrix.csv)"));
  return metrics;
}

}  // namespace kiln
