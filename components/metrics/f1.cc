// f1: per class, F1 = 2 TP / (2 TP + FP + FN) (0 for a class never predicted right), over the
// classes that occur or are predicted: a value per class (average: none, logged as ENTRY/NAME),
// their mean (macro, the default) or F1 over all rows at once (micro).
#include "components/metrics/classification.h"
#include "lib/registry/registry.h"

namespace kiln::metrics {
namespace {

struct F1Options : MetricOptions {
  std::string average = "macro";
};

class F1 : public ClassCountsMetric {
 public:
  explicit F1(const F1Options& o) : ClassCountsMetric(o), average_(o.average) {}

  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>& class_names) const override {
    PerClass t = Tally();
    MetricValues values;
    double sum = 0;
    int64_t classes = 0, correct = 0, support_and_predicted = 0;
    for (int64_t c = 0; c < num_classes(); ++c) {
      size_t i = static_cast<size_t>(c);
      int64_t denominator = t.support[i] + t.predicted[i];
      if (denominator == 0) continue;
      double f1 = 2.0 * static_cast<double>(t.correct[i]) / static_cast<double>(denominator);
      if (average_ == "none") values[ClassName(c, num_classes(), class_names)] = f1;
      sum += f1;
      ++classes;
      correct += t.correct[i];
      support_and_predicted += denominator;
    }
    if (classes == 0 || average_ == "none") return values;
    if (average_ == "macro") return MetricValues{{"", sum / static_cast<double>(classes)}};
    return MetricValues{
        {"", 2.0 * static_cast<double>(correct) / static_cast<double>(support_and_predicted)}};
  }

 protected:
  const char* name() const override { return "f1"; }

 private:
  std::string average_;
};

KILN_REGISTER_BOUND(Metric, "f1",
                    "F1 score per class (none), their mean (macro) or over all rows (micro)",
                    MetricOptionBinding<F1Options>().Field(
                        "average", &F1Options::average,
                        "macro (mean over classes), none (a value per class) or micro",
                        OneOf({"macro", "none", "micro"})),
                    [](const F1Options& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<F1>(o);
                    });

}  // namespace
}  // namespace kiln::metrics
