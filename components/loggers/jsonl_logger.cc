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

KILN_REGISTER(MetricsLogger, "jsonl", "metrics.jsonl: one JSON object per logged row",
              OptionSchema().String("save_dir", ".", "folder for metrics.jsonl"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<MetricsLogger>> {
                KILN_ASSIGN_OR_RETURN(std::string dir, cfg.Get<std::string>("save_dir"));
                return std::make_shared<JsonlLogger>(dir);
              });

}  // namespace
}  // namespace kiln
