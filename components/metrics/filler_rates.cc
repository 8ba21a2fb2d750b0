// false_accept_rate and miss_rate: the two errors that matter to a keyword spotter. Some
// classes are filler (unknown word, silence): a filler example predicted as any keyword is a
// false accept (rate over filler examples); a keyword example predicted as filler is a miss
// (rate over keyword examples). Nothing is logged without filler classes or class names.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/metrics/classification.h"
#include "lib/registry/registry.h"

namespace kiln::metrics {
namespace {

struct FillerRateOptions : MetricOptions {
  std::vector<std::string> filler_classes;
};

class FillerRate : public ClassCountsMetric {
 public:
  FillerRate(const FillerRateOptions& o, bool false_accepts)
      : ClassCountsMetric(o), fillers_(o.filler_classes), false_accepts_(false_accepts) {}

  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>& class_names) const override {
    const int64_t n = num_classes();
    if (fillers_.empty() || static_cast<int64_t>(class_names.size()) != n) return MetricValues();
    std::vector<bool> filler(class_names.size(), false);
    for (const std::string& f : fillers_) {
      auto it = std::find(class_names.begin(), class_names.end(), f);
      if (it == class_names.end()) {
        return absl::InvalidArgumentError(absl::StrCat(name(), ": filler class '", f,
                                                       "' is not a class (",
                                                       absl::StrJoin(class_names, ", "), ")"));
      }
      filler[static_cast<size_t>(it - class_names.begin())] = true;
    }
    // False accepts: filler examples (rows) predicted as a keyword (columns); misses the reverse.
    auto c = counts().accessor<int64_t, 2>();
    int64_t errors = 0, examples = 0;
    for (int64_t t = 0; t < n; ++t) {
      if (filler[static_cast<size_t>(t)] != false_accepts_) continue;
      for (int64_t p = 0; p < n; ++p) {
        examples += c[t][p];
        if (filler[static_cast<size_t>(p)] == false_accepts_) continue;
        errors += c[t][p];
      }
    }
    if (examples == 0) return MetricValues();
    return MetricValues{{"", static_cast<double>(errors) / static_cast<double>(examples)}};
  }

 protected:
  const char* name() const override { return false_accepts_ ? "false_accept_rate" : "miss_rate"; }

 private:
  std::vector<std::string> fillers_;
  bool false_accepts_;
};

OptionBinding<FillerRateOptions> FillerRateBinding() {
  return MetricOptionBinding<FillerRateOptions>().Field(
      "filler_classes", &FillerRateOptions::filler_classes,
      "the classes that are not keywords (unknown, silence); []: none");
}
KILN_REGISTER_BOUND(Metric, "false_accept_rate",
                    "Share of filler examples (not a keyword) taken for a keyword",
                    FillerRateBinding(),
                    [](const FillerRateOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<FillerRate>(o, true);
                    });
KILN_REGISTER_BOUND(Metric, "miss_rate", "Share of keyword examples taken for filler",
                    FillerRateBinding(),
                    [](const FillerRateOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<FillerRate>(o, false);
                    });

}  // namespace
}  // namespace kiln::metrics
