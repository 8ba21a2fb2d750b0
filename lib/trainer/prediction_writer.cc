#include "lib/trainer/prediction_writer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/csv.h"
#include "lib/base/files.h"
#include "lib/registry/registry.h"
#include "lib/trainer/prediction_json.h"

namespace kiln {

absl::StatusOr<std::vector<PredictionRecord>> ClassProbabilityRecords(
    const torch::Tensor& probabilities, const std::vector<std::string>& class_names) {
  if (probabilities.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kiln predict expects class probabilities [batch, classes] from the task, got ",
        c10::str(probabilities.sizes())));
  }
  auto [probability, index] = probabilities.to(torch::kFloat64).max(1);
  std::vector<PredictionRecord> records;
  for (int64_t i = 0; i < probabilities.size(0); ++i) {
    int64_t c = index[i].item<int64_t>();
    std::string name = c < static_cast<int64_t>(class_names.size())
                           ? class_names[static_cast<size_t>(c)]
                           : std::to_string(c);
    PredictionRecord record;
    record.fields = {{"class_index", config::Node::Int(c)},
                     {"class", config::Node::String(name)},
                     {"probability", config::Node::Float(probability[i].item<double>())}};
    records.push_back(std::move(record));
  }
  return records;
}

namespace {

std::string CsvValue(const config::Node& value) {
  switch (value.kind()) {
    case config::NodeKind::kInt: return absl::StrCat(value.as_int());
    case config::NodeKind::kFloat: return absl::StrFormat("%.6f", value.as_float());
    case config::NodeKind::kBool: return value.as_bool() ? "true" : "false";
    case config::NodeKind::kString: return CsvCell(value.as_string());
    default: return "";
  }
}

struct WriterOptions {
  std::string file;
};

// One row per record: path, then the records' fields (the first record's names are the header).
class CsvWriter : public PredictionWriter {
 public:
  explicit CsvWriter(std::string file) : file_(std::move(file)) {}
  absl::StatusOr<std::string> Write(const std::string& output_dir,
                                    const std::vector<PredictionRecord>& records) override {
    std::string csv = "path";
    if (!records.empty()) {
      for (const auto& [name, value] : records[0].fields) absl::StrAppend(&csv, ",", name);
    }
    csv += "\n";
    for (const auto& r : records) {
      csv += CsvCell(r.source);
      for (const auto& [name, value] : r.fields) absl::StrAppend(&csv, ",", CsvValue(*value));
      csv += "\n";
    }
    std::string path = output_dir + "/" + file_;
    if (auto st = WriteFileAtomically(path, csv); !st.ok()) return st;
    return path;
  }

 private:
  std::string file_;
};

// One JSON object per line: {"path": ..., field: value, ...}, numbers as numbers.
class JsonlWriter : public PredictionWriter {
 public:
  explicit JsonlWriter(std::string file) : file_(std::move(file)) {}
  absl::StatusOr<std::string> Write(const std::string& output_dir,
                                    const std::vector<PredictionRecord>& records) override {
    std::string text;
    for (const auto& r : records) {
      nlohmann::ordered_json line;
      line["path"] = r.source;
      AddPredictionFields(r.fields, line);
      text += line.dump() + "\n";
    }
    std::string path = output_dir + "/" + file_;
    if (auto st = WriteFileAtomically(path, text); !st.ok()) return st;
    return path;
  }

 private:
  std::string file_;
};

struct CsvOptions : WriterOptions {
  CsvOptions() { file = "predictions.csv"; }
};
struct JsonlOptions : WriterOptions {
  JsonlOptions() { file = "predictions.jsonl"; }
};

KILN_REGISTER_BOUND(PredictionWriter, "csv",
                    "Writes predictions as CSV, one row per input (path first)",
                    OptionBinding<CsvOptions>().Field(
                        "file", static_cast<std::string CsvOptions::*>(&WriterOptions::file),
                        "file name in the run directory", NonEmpty()),
                    [](const CsvOptions& o) -> absl::StatusOr<std::shared_ptr<PredictionWriter>> {
                      return std::make_shared<CsvWriter>(o.file);
                    });

KILN_REGISTER_BOUND(PredictionWriter, "jsonl",
                    "Writes predictions as JSON Lines, one object per input",
                    OptionBinding<JsonlOptions>().Field(
                        "file", static_cast<std::string JsonlOptions::*>(&WriterOptions::file),
                        "file name in the run directory", NonEmpty()),
                    [](const JsonlOptions& o) -> absl::StatusOr<std::shared_ptr<PredictionWriter>> {
                      return std::make_shared<JsonlWriter>(o.file);
                    });

}  // namespace
}  // namespace kiln
