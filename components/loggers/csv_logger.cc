// csv: metrics.csv in save_dir, one row per logged step, a column per metric (Lightning's
// CSVLogger layout). Rows are appended and flushed as they come (an interrupted run keeps every row
// logged); the file is rewritten (atomically) only when a new metric name adds a column. Numbers
// are written as Python's repr writes them: the shortest text that reads back to the same double.
// A resumed fit keeps the rows of the earlier run up to the step it resumes from.
#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "components/loggers/appending_file.h"
#include "lib/config/node.h"
#include "lib/registry/registry.h"
#include "lib/trainer/callback.h"

namespace kiln {
namespace {

class CsvLogger : public MetricsLogger {
 public:
  explicit CsvLogger(const std::string& dir) : file_(dir + "/metrics.csv") {}

  absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) override {
    Row row{step, {}};
    bool new_column = file_.fresh();
    for (const auto& [k, v] : metrics) {
      row.cells[k] = config::PythonFloatRepr(v);
      new_column |= columns_.insert(k).second;
    }
    rows_.push_back(std::move(row));
    if (new_column) return Rewrite();
    return file_.Append(Line(rows_.back()));
  }

  absl::Status OnResume(int64_t step) override {
    std::ifstream in(file_.path());
    std::string line;
    if (!std::getline(in, line)) return absl::OkStatus();
    std::vector<std::string> header = absl::StrSplit(line, ',');
    if (header.empty() || header[0] != "step") return absl::OkStatus();  // not ours: start afresh
    for (size_t i = 1; i < header.size(); ++i) columns_.insert(header[i]);
    while (std::getline(in, line)) {
      std::vector<std::string> cells = absl::StrSplit(line, ',');
      Row row;
      // A row cut short by the interruption, or logged after the checkpoint, is left out.
      if (cells.size() != header.size() || !absl::SimpleAtoi(cells[0], &row.step) ||
          row.step > step)
        continue;
      for (size_t i = 1; i < cells.size(); ++i) {
        if (!cells[i].empty()) row.cells[header[i]] = cells[i];
      }
      rows_.push_back(std::move(row));
    }
    return Rewrite();
  }

  absl::Status Finish() override { return file_.Close(); }

 private:
  struct Row {
    int64_t step = 0;
    std::map<std::string, std::string> cells;
  };

  std::string Line(const Row& row) const {
    std::vector<std::string> cells = {std::to_string(row.step)};
    for (const auto& c : columns_) {
      auto it = row.cells.find(c);
      cells.push_back(it == row.cells.end() ? "" : it->second);
    }
    return absl::StrJoin(cells, ",") + "\n";
  }

  // The whole file again, under the current header.
  absl::Status Rewrite() {
    std::vector<std::string> header = {"step"};
    header.insert(header.end(), columns_.begin(), columns_.end());
    std::string out = absl::StrJoin(header, ",") + "\n";
    for (const auto& row : rows_) out += Line(row);
    return file_.StartWith(out);
  }

  AppendingFile file_;
  std::vector<Row> rows_;  // kept for the rewrite a new column needs
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
