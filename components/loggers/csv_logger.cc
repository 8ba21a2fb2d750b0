// csv: metrics.csv in save_dir, one row per logged step, a column per metric (Lightning's
// CSVLogger layout). Rewritten atomically as columns appear.
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/core/files.h"
#include "lib/registry/registry.h"
#include "lib/trainer/callback.h"

namespace kiln {
namespace {

class CsvLogger : public MetricsLogger {
 public:
  explicit CsvLogger(std::string dir) : dir_(std::move(dir)) {}

  absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) override {
    rows_.push_back({step, metrics});
    for (const auto& [k, v] : metrics) columns_.insert(k);
    return Write();
  }

 private:
  absl::Status Write() {
    KILN_RETURN_IF_ERROR(MakeDirs(dir_));
    std::vector<std::string> header = {"step"};
    header.insert(header.end(), columns_.begin(), columns_.end());
    std::string out = absl::StrJoin(header, ",") + "\n";
    for (const auto& [step, metrics] : rows_) {
      std::vector<std::string> cells = {std::to_string(step)};
      for (const auto& c : columns_) {
        auto it = metrics.find(c);
        cells.push_back(it == metrics.end() ? "" : absl::StrFormat("%.6g", it->second));
      }
      out += absl::StrJoin(cells, ",") + "\n";
    }
    return WriteFileAtomically(dir_ + "/metrics.csv", out);
  }

  std::string dir_;
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows_;
  std::set<std::string> columns_;
};

struct CsvLoggerOptions {
  std::string save_dir = ".";
};

KILN_REGISTER_BOUND(MetricsLogger, "csv", "metrics.csv: a row per logged step, a column per metric",
                    OptionBinding<CsvLoggerOptions>().Field("save_dir", &CsvLoggerOptions::save_dir,
                                                            "folder for metrics.csv"),
                    [](const CsvLoggerOptions& o)
                        -> absl::StatusOr<std::shared_ptr<MetricsLogger>> {
                      return std::make_shared<CsvLogger>(o.save_dir);
                    });

}  // namespace
}  // namespace kiln
