// accuracy: the share of rows whose highest score is the true class (average: micro); or per
// class, the share of each class's rows predicted right (average: none, a value per class that
// occurs, logged as ENTRY/NAME), or their mean (macro). The file to copy for a new metric.
#include "absl/strings/str_cat.h"
#include "components/metrics/classification.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::metrics {
namespace {

struct AccuracyOptions : MetricOptions {
  std::string average = "micro";
};

class Accuracy : public Metric {
 public:
  explicit Accuracy(const AccuracyOptions& o) : Metric(o) {
    AddState("correct", &correct_);
    AddState("total", &total_);
  }

  absl::Status Update(const MetricBatch& batch) override {
    KILN_ASSIGN_OR_RETURN(Rows rows, CountedRows(batch, "accuracy"));
    correct_ += rows.preds.argmax(1).eq(rows.target).sum().item<int64_t>();
    total_ += rows.target.size(0);
    return absl::OkStatus();
  }

  absl::StatusOr<MetricValues> Compute(
      const std::vector<std::string>& /*class_names*/) const override {
    return Share(correct_, total_);
  }

 private:
  torch::Tensor correct_ = torch::zeros({}, torch::kInt64);
  torch::Tensor total_ = torch::zeros({}, torch::kInt64);
};

class AccuracyByClass : public ClassCountsMetric {
 public:
  explicit AccuracyByClass(const AccuracyOptions& o)
      : ClassCountsMetric(o), macro_(o.average == "macro") {}

  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>& class_names) const override {
    PerClass t = Tally();
    MetricValues values;
    double sum = 0;
    int64_t classes = 0;
    for (int64_t c = 0; c < num_classes(); ++c) {
      size_t i = static_cast<size_t>(c);
      if (t.support[i] == 0) continue;
      double accuracy = static_cast<double>(t.correct[i]) / static_cast<double>(t.support[i]);
      if (!macro_) values[ClassName(c, num_classes(), class_names)] = accuracy;
      sum += accuracy;
      ++classes;
    }
    if (macro_ && classes > 0) values[""] = sum / static_cast<double>(classes);
    return values;
  }

 protected:
  const char* name() const override { return "accuracy"; }

 private:
  bool macro_;
};

KILN_REGISTER_BOUND(Metric, "accuracy",
                    "Share of rows predicted right (micro); per class (none) or their mean (macro)",
                    MetricOptionBinding<AccuracyOptions>().Field(
                        "average", &AccuracyOptions::average,
                        "micro (all rows), none (a value per class) or macro (their mean)",
                        OneOf({"micro", "none", "macro"})),
                    [](const AccuracyOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      if (o.average == "micro") return std::make_shared<Accuracy>(o);
                      return std::make_shared<AccuracyByClass>(o);
                    });

}  // namespace
}  // namespace kiln::metrics
