// jsonl: metrics.jsonl in save_dir, one JSON object per logged row ({"step": 10, "train/loss":
// 0.31, ...}), flushed as rows come, so `tail -f` and pandas.read_json(lines=True) read it during
// training. Each run starts the file afresh; a resumed fit keeps the rows up to the step it resumes
// from.
#include <fstream>
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

  absl::Status OnResume(int64_t step) override {
    std::ifstream in(file_.path());
    std::string line, kept;
    while (std::getline(in, line)) {
      // A row cut short by the interruption, or logged after the checkpoint, is left out.
      auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!row.is_object() || !row.contains("step") || !row["step"].is_number_integer() ||
          row["step"].get<int64_t>() > step)
        continue;
      kept += line + "\n";
    }
    return file_.StartWith(kept);
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
