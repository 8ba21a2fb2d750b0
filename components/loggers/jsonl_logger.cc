// jsonl: metrics.jsonl in save_dir, one JSON object per logged row ({"step": 10, "train/loss":
// 0.31, ...}), flushed as rows come, so `tail -f` and pandas.read_json(lines=True) read it during
// training. Each run starts the file afresh.
#include <nlohmann/json.hpp>

#include "components/loggers/appending_file.h"
#include "lib/registry/registry.h"
#include "lib/trainer/callback.h"

namespace kiln {
namespace {

class JsonlLogger : public MetricsLogger {
 public:
  explicit JsonlLogger(const std::string& dir) : file_(dir + "/metrics.jsonl") {}

  absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) override {
    nlohmann::ordered_json row;
    row["step"] = step;
    // Non-finite values become null: JSON has no NaN.
    for (const auto& [k, v] : metrics) row[k] = v;
    return file_.Append(row.dump() + "\n");
  }

  absl::Status Finish() override { return file_.Close(); }

 private:
  AppendingFile file_;
};

struct JsonlLoggerOptions {
  std::string save_dir = ".";
};

KILN_REGISTER_BOUND(
    MetricsLogger, "jsonl", "metrics.jsonl: one JSON object per logged row",
    OptionBinding<JsonlLoggerOptions>().Field("save_dir", &JsonlLoggerOptions::save_dir,
                                              "folder for metrics.jsonl"),
    [](const JsonlLoggerOptions& o) -> absl::StatusOr<std::shared_ptr<MetricsLogger>> {
      return std::make_shared<JsonlLogger>(o.save_dir);
    });

}  // namespace
}  // namespace kiln
