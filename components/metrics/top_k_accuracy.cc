// top_k_accuracy: the share of rows whose true class is among the k highest scores. Nothing is
// logged when k is not below the number of classes (every row would count).
#include "components/metrics/classification.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::metrics {
namespace {

struct TopKAccuracyOptions : MetricOptions {
  int64_t k = 5;
};

class TopKAccuracy : public Metric {
 public:
  explicit TopKAccuracy(const TopKAccuracyOptions& o) : Metric(o), k_(o.k) {
    AddState("correct", &correct_);
    AddState("total", &total_);
  }

  absl::Status Setup(const MetricSetup& setup) override {
    num_classes_ = setup.num_classes;
    return absl::OkStatus();
  }

  absl::Status Update(const MetricBatch& batch) override {
    KILN_ASSIGN_OR_RETURN(Rows rows, CountedRows(batch, "top_k_accuracy"));
    if (num_classes_ == 0) num_classes_ = rows.preds.size(1);
    if (k_ >= rows.preds.size(1)) return absl::OkStatus();
    torch::Tensor top = std::get<1>(rows.preds.topk(k_, 1));
    correct_ += top.eq(rows.target.unsqueeze(1)).any(1).sum().item<int64_t>();
    total_ += rows.target.size(0);
    return absl::OkStatus();
  }

  absl::StatusOr<MetricValues> Compute(
      const std::vector<std::string>& /*class_names*/) const override {
    if (k_ >= num_classes_) return MetricValues();
    return Share(correct_, total_);
  }

 private:
  int64_t k_;
  int64_t num_classes_ = 0;  // the task's, else the scores'
  torch::Tensor correct_ = torch::zeros({}, torch::kInt64);
  torch::Tensor total_ = torch::zeros({}, torch::kInt64);
};

KILN_REGISTER_BOUND(Metric, "top_k_accuracy",
                    "Share of rows whose true class is among the k highest scores",
                    MetricOptionBinding<TopKAccuracyOptions>().Field(
                        "k", &TopKAccuracyOptions::k, "how many of the highest scores count",
                        AtLeast(1)),
                    [](const TopKAccuracyOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<TopKAccuracy>(o);
                    });

}  // namespace
}  // namespace kiln::metrics
