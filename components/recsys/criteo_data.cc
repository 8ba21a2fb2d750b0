// `criteo`: click data in the Criteo format (TSV or gzip; components/recsys/criteo_file.h), for
// click_prediction. A batch's input is int64 [B, 39]: the 13 integer features as counts (the
// model takes log(1 + x)), then the 26 categorical features as indices into their tables (one
// value per feature: TorchRec's KeyedJaggedTensor with every length 1); its target the float
// label. Each file is read once into compact rows (160 bytes a row); the validation split is a
// seeded share of train unless `val` names a file. With `stream: true` the files (several, by {..}
// ranges or globs) are read as a stream each epoch instead (components/recsys/criteo_stream.h).
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/recsys/click_data.h"
#include "components/recsys/criteo_file.h"
#include "components/recsys/criteo_stream.h"
#include "components/recsys/table_sizes.h"
#include "lib/base/status_macros.h"
#include "lib/data/batching_options.h"
#include "lib/data/shards/shard_set.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::recsys {
namespace {

struct CriteoDataOptions : data::BatchingOptions {
  CriteoDataOptions() { batch_size = 512; }
  std::string train;
  std::optional<std::string> val, test, predict;
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  std::vector<int64_t> num_embeddings_per_feature = std::vector<int64_t>(kCriteoSparse, 100000);
  std::string bad_lines = "error";
  int64_t max_rows = 0;
  bool stream = false;
  int64_t shuffle_buffer = 100000;
};

// A file's rows: Get is a row, GetStacked one index_select.
class ClickRows : public data::Dataset {
 public:
  ClickRows(std::string path, CriteoRows rows) : path_(std::move(path)), rows_(std::move(rows)) {}
  int64_t size() const override { return rows_.features.size(0); }
  absl::StatusOr<data::Example> Get(int64_t index, data::SampleRng&) const override {
    return data::Example{rows_.features[index].to(torch::kInt64), rows_.labels[index].clone()};
  }
  bool deterministic() const override { return true; }
  std::optional<data::Example> GetStacked(const std::vector<int64_t>& indices) const override {
    torch::Tensor at = torch::tensor(indices, torch::kInt64);
    return data::Example{rows_.features.index_select(0, at).to(torch::kInt64),
                         rows_.labels.index_select(0, at)};
  }
  std::string Source(int64_t index) const override {
    return absl::StrCat(path_, ":", rows_.line_numbers.at(static_cast<size_t>(index)));
  }

 private:
  std::string path_;
  CriteoRows rows_;
};

class CriteoData : public ClickDataModule {
 public:
  explicit CriteoData(CriteoDataOptions o) : o_(std::move(o)) {
    read_.num_embeddings = o_.num_embeddings_per_feature;
    read_.bad_lines = o_.bad_lines == "skip" ? BadLines::kSkip : BadLines::kError;
    read_.max_rows = o_.max_rows;
  }

  absl::Status Setup(data::Stage stage) override {
    switch (stage) {
      case data::Stage::kFit:
      case data::Stage::kValidate: return SetupFit();
      case data::Stage::kTest: {
        if (!o_.test.has_value() || o_.test->empty())
          return absl::InvalidArgumentError("data.test is not set: no file to test on");
        if (test_) return absl::OkStatus();
        KILN_ASSIGN_OR_RETURN(test_, Open(*o_.test, "data.test"));
        return absl::OkStatus();
      }
      case data::Stage::kPredict: {
        std::string path = o_.predict.value_or(o_.test.value_or(""));
        if (path.empty())
          return absl::InvalidArgumentError("data.predict is not set: no file to predict");
        if (predict_) return absl::OkStatus();
        KILN_ASSIGN_OR_RETURN(std::string file, OneFile(path, "data.predict"));
        KILN_ASSIGN_OR_RETURN(predict_, Read(file, true));
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const data::Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const data::Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const data::Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const data::Dataset> predict_dataset() const override { return predict_; }
  data::LoaderOptions loader_options() const override { return o_.loader(); }
  const std::vector<int64_t>& num_embeddings() const override { return read_.num_embeddings; }

  // A Criteo-format line, with or without its label.
  absl::StatusOr<data::Example> RawExample(std::string_view raw) const override {
    while (!raw.empty() && (raw.back() == '\n' || raw.back() == '\r')) raw.remove_suffix(1);
    CriteoRow row;
    std::string problem = ParseCriteoLine(raw, /*label_optional=*/true, &row);
    if (!problem.empty()) return absl::InvalidArgumentError("the input line " + problem);
    std::vector<int32_t> features(kCriteoDense + kCriteoSparse);
    CriteoFeatures(row, read_.num_embeddings, features.data());
    return data::Example{torch::tensor(features, torch::kInt32).to(torch::kInt64),
                         torch::tensor(static_cast<float>(row.label))};
  }

 private:
  absl::Status SetupFit() {
    if (train_) return absl::OkStatus();
    const bool has_val = o_.val.has_value() && !o_.val->empty();
    if (o_.stream && !has_val) {
      return absl::InvalidArgumentError(
          "data.stream=true reads data.train in order, so no val_fraction share can be held out "
          "of it: set data.val to a file of its own (as Criteo's last day is)");
    }
    KILN_ASSIGN_OR_RETURN(auto train, Open(o_.train, "data.train"));
    if (o_.stream) {
      Logger::Instance().Info(
          absl::StrCat("criteo: the training stream is shuffled through a "
                       "buffer of ",
                       o_.shuffle_buffer, " rows (data.shuffle_buffer)"));
    }
    if (has_val) {
      train_ = train;
      KILN_ASSIGN_OR_RETURN(val_, Open(*o_.val, "data.val"));
      return absl::OkStatus();
    }
    auto [train_idx, val_idx] = data::RandomSplit(train->size(), o_.val_fraction, o_.split_seed);
    train_ = data::Subset(train, std::move(train_idx));
    if (!val_idx.empty()) val_ = data::Subset(train, std::move(val_idx));
    return absl::OkStatus();
  }

  // The rows `spec` names: a stream of its files (stream: true), or the one file's rows in memory.
  absl::StatusOr<std::shared_ptr<const data::Dataset>> Open(const std::string& spec,
                                                            const std::string& option) {
    if (!o_.stream) {
      KILN_ASSIGN_OR_RETURN(std::string file, OneFile(spec, option));
      return Read(file, false);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> files, data::shards::MatchFiles(spec, option));
    return CriteoStream::Open(std::move(files), read_, o_.shuffle_buffer, option);
  }

  // The one file `spec` names (read into memory).
  static absl::StatusOr<std::string> OneFile(const std::string& spec, const std::string& option) {
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> files, data::shards::MatchFiles(spec, option));
    if (files.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          option, ": '", spec, "' names ", files.size(),
          " files; data.stream=true reads several (read into memory, it is one file)"));
    }
    return files[0];
  }

  absl::StatusOr<std::shared_ptr<const data::Dataset>> Read(const std::string& path, bool predict) {
    CriteoReadOptions read = read_;
    read.label_optional = predict;
    auto start = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(CriteoRows rows, ReadCriteoFile(path, read));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rows.features.size(0) == 0)
      return absl::InvalidArgumentError(absl::StrCat(path, ": no rows"));
    std::string skipped =
        rows.skipped > 0 ? absl::StrCat(", ", rows.skipped, " bad lines skipped") : "";
    Logger::Instance().Info(absl::StrFormat("criteo: %s: %d rows%s (%.1f s)", path,
                                            rows.features.size(0), skipped, seconds));
    return std::make_shared<ClickRows>(path, std::move(rows));
  }

  CriteoDataOptions o_;
  CriteoReadOptions read_;
  std::shared_ptr<const data::Dataset> train_, val_, test_, predict_;
};

KILN_REGISTER_BOUND(
    data::DataModule, "criteo",
    "Click data in the Criteo format (label, 13 integer, 26 hex categorical features; TSV or gzip)",
    data::AddBatchingOptions(
        OptionBinding<CriteoDataOptions>()
            .Required("train", &CriteoDataOptions::train, "the training file (.tsv or .tsv.gz)")
            .Field("val", &CriteoDataOptions::val,
                   "the validation file; null: a val_fraction share of train")
            .Field("test", &CriteoDataOptions::test, "the test file")
            .Field("predict", &CriteoDataOptions::predict,
                   "the file to predict (lines with or without a label); null: test")
            .Field("val_fraction", &CriteoDataOptions::val_fraction,
                   "share of train held out for validation when val is null", InRange(0, 0.9))
            .Field("split_seed", &CriteoDataOptions::split_seed, "seed of that split")
            .Parsed<std::vector<int64_t>>(
                "num_embeddings_per_feature", &CriteoDataOptions::num_embeddings_per_feature,
                OptionType::kAny, "100000", kTableSizesDoc, kTableSizesWhat,
                [](const config::Node& n) { return ReadTableSizes(n, kCriteoSparse); })
            .Field("bad_lines", &CriteoDataOptions::bad_lines,
                   "a malformed line (field count, label, number, hash): error (stop, naming "
                   "file:line) or skip (leave it out, count it)",
                   OneOf({"error", "skip"}))
            .Field("max_rows", &CriteoDataOptions::max_rows,
                   "read at most this many rows of each file (0: all)", AtLeast(0))
            .Field("stream", &CriteoDataOptions::stream,
                   "read train, val and test as a stream each epoch (memory: the shuffle buffer "
                   "and the loader's look-ahead, whatever the data's size; several files by {..} "
                   "ranges or globs; needs val) rather than into memory")
            .Field("shuffle_buffer", &CriteoDataOptions::shuffle_buffer,
                   "stream: rows in the training stream's shuffle buffer", AtLeast(1)),
        "rows"),
    [](const CriteoDataOptions& o) -> absl::StatusOr<std::shared_ptr<data::DataModule>> {
      return std::make_shared<CriteoData>(o);
    });

}  // namespace
}  // namespace kiln::recsys
