#include "components/metrics/classification.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace kiln::metrics {

absl::StatusOr<Rows> CountedRows(const MetricBatch& batch, const std::string& metric) {
  const torch::Tensor& preds = batch.preds;
  const torch::Tensor& target = batch.target;
  if (!preds.defined() || !target.defined() || preds.dim() != target.dim() + 1 ||
      preds.sizes().slice(0, static_cast<size_t>(target.dim())) != target.sizes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(metric, " needs scores [..., classes] and class ids [...], got ",
                     preds.defined() ? c10::str(preds.sizes()) : "none", " and ",
                     target.defined() ? c10::str(target.sizes()) : "none"));
  }
  Rows rows{preds.reshape({-1, preds.size(-1)}), target.reshape({-1}).to(torch::kInt64)};
  // A mask that keeps every row (a language model's blocks without padding) costs no copy of the
  // scores (a masked index is a nonzero and a gather).
  if (batch.mask.defined()) {
    torch::Tensor keep = batch.mask.reshape({-1}).to(rows.target.device(), torch::kBool);
    if (keep.all().item<bool>()) return rows;
    rows.preds = rows.preds.index({keep});
    rows.target = rows.target.index({keep});
  }
  return rows;
}

std::string ClassName(int64_t index, int64_t num_classes,
                      const std::vector<std::string>& class_names) {
  if (static_cast<int64_t>(class_names.size()) == num_classes)
    return class_names[static_cast<size_t>(index)];
  return std::to_string(index);
}

absl::Status ClassCountsMetric::Setup(const MetricSetup& setup) {
  if (setup.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), " counts per class: it needs a classification task (one with num_classes)"));
  }
  num_classes_ = setup.num_classes;
  counts_ = torch::zeros({num_classes_, num_classes_}, torch::kInt64);
  AddState("counts", &counts_);
  return absl::OkStatus();
}

absl::Status ClassCountsMetric::Update(const MetricBatch& batch) {
  KILN_ASSIGN_OR_RETURN(Rows rows, CountedRows(batch, name()));
  if (rows.preds.size(1) != num_classes_) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": scores for ", rows.preds.size(1),
                                                   " classes, but the task has ", num_classes_));
  }
  torch::Tensor target = rows.target.to(torch::kCPU);
  if (target.numel() > 0 &&
      (target.min().item<int64_t>() < 0 || target.max().item<int64_t>() >= num_classes_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": a class id outside [0, ", num_classes_, ")"));
  }
  torch::Tensor cell = target * num_classes_ + rows.preds.argmax(1).to(torch::kCPU);
  counts_ +=
      torch::bincount(cell, {}, num_classes_ * num_classes_).view({num_classes_, num_classes_});
  return absl::OkStatus();
}

ClassCountsMetric::PerClass ClassCountsMetric::Tally() const {
  PerClass t;
  auto c = counts_.accessor<int64_t, 2>();
  for (int64_t k = 0; k < num_classes_; ++k) {
    int64_t support = 0, predicted = 0;
    for (int64_t j = 0; j < num_classes_; ++j) {
      support += c[k][j];
      predicted += c[j][k];
    }
    t.support.push_back(support);
    t.predicted.push_back(predicted);
    t.correct.push_back(c[k][k]);
  }
  return t;
}

}  // namespace kiln::metrics
