// confusion_matrix: counts per (true class, predicted class). It logs no value; at the end of a
// test it writes STAGE_confusion_matrix.csv (rows: true class, columns: predicted) and
// STAGE_per_class_accuracy.csv (support, correct, accuracy) and logs the accuracy per class.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "components/metrics/classification.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::metrics {
namespace {

class ConfusionMatrix : public ClassCountsMetric {
 public:
  using ClassCountsMetric::ClassCountsMetric;

  absl::StatusOr<MetricValues> Compute(
      const std::vector<std::string>& /*class_names*/) const override {
    return MetricValues();
  }

  absl::Status WriteReport(const std::string& output_dir, const std::string& stage,
                           const std::vector<std::string>& class_names) const override {
    const int64_t n = num_classes();
    std::vector<std::string> names;
    for (int64_t c = 0; c < n; ++c) names.push_back(ClassName(c, n, class_names));
    auto counts = this->counts().accessor<int64_t, 2>();
    PerClass t = Tally();
    std::string matrix = "true/predicted," + absl::StrJoin(names, ",") + "\n";
    std::string per_class = "class,support,correct,accuracy\n";
    std::vector<std::string> summary;
    for (int64_t c = 0; c < n; ++c) {
      size_t i = static_cast<size_t>(c);
      std::vector<std::string> row = {names[i]};
      for (int64_t p = 0; p < n; ++p) row.push_back(std::to_string(counts[c][p]));
      matrix += absl::StrJoin(row, ",") + "\n";
      if (t.support[i] == 0) {
        per_class += absl::StrCat(names[i], ",0,0,\n");
        continue;
      }
      double accuracy = static_cast<double>(t.correct[i]) / static_cast<double>(t.support[i]);
      per_class +=
          absl::StrCat(names[i], ",", t.support[i], ",", t.correct[i], ",", accuracy, "\n");
      summary.push_back(absl::StrCat(names[i], " ", absl::StrFormat("%.4f", accuracy)));
    }
    std::string file = absl::StrCat(output_dir, "/", stage, "_confusion_matrix.csv");
    KILN_RETURN_IF_ERROR(MakeDirs(output_dir));
    KILN_RETURN_IF_ERROR(WriteFileAtomically(file, matrix));
    KILN_RETURN_IF_ERROR(WriteFileAtomically(
        absl::StrCat(output_dir, "/", stage, "_per_class_accuracy.csv"), per_class));
    Logger::Instance().Info(absl::StrCat(
        stage, " accuracy per class: ", absl::StrJoin(summary, "  "), " (", file, ")"));
    return absl::OkStatus();
  }

 protected:
  const char* name() const override { return "confusion_matrix"; }
};

KILN_REGISTER_BOUND(
    Metric, "confusion_matrix",
    "Counts per (true, predicted) class; a test writes them and the accuracy per class as CSV",
    MetricOptionBinding<MetricOptions>(),
    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
      return std::make_shared<ConfusionMatrix>(o);
    });

}  // namespace
}  // namespace kiln::metrics
