#include "components/recsys/criteo_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace kiln::recsys {
namespace {

// A gzip or plain file read line by line (zlib reads plain files as they are).
class LineReader {
 public:
  explicit LineReader(gzFile file) : file_(file) {}
  ~LineReader() { gzclose(file_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its '\n'; false at the end. A read error sets error().
  bool Next(std::string* line) {
    line->clear();
    while (true) {
      if (pos_ == end_) {
        int n = gzread(file_, buffer_, sizeof(buffer_));
        if (n <= 0) {
          int code = 0;
          const char* message = gzerror(file_, &code);
          if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) {
            // A damaged or cut stream: its partial last line is not handed out as a line.
            error_ = true;
            message_ = message ? message : "";
            return false;
          }
          return !line->empty();
        }
        pos_ = 0;
        end_ = static_cast<size_t>(n);
      }
      const char* start = buffer_ + pos_;
      const void* newline = memchr(start, '\n', end_ - pos_);
      if (newline != nullptr) {
        size_t len = static_cast<size_t>(static_cast<const char*>(newline) - start);
        line->append(start, len);
        pos_ += len + 1;
        return true;
      }
      line->append(start, end_ - pos_);
      pos_ = end_;
    }
  }
  bool error() const { return error_; }
  const std::string& message() const { return message_; }

 private:
  gzFile file_;
  char buffer_[1 << 16];
  size_t pos_ = 0, end_ = 0;
  bool error_ = false;
  std::string message_;
};

}  // namespace

void CriteoFeatures(const CriteoRow& row, const std::vector<int64_t>& num_embeddings,
                    int32_t* out) {
  for (int i = 0; i < kCriteoDense; ++i) out[i] = row.dense[static_cast<size_t>(i)];
  for (int j = 0; j < kCriteoSparse; ++j) {
    auto k = static_cast<size_t>(j);
    out[kCriteoDense + j] =
        static_cast<int32_t>(static_cast<int64_t>(row.sparse[k]) % num_embeddings[k]);
  }
}

absl::StatusOr<CriteoRows> ReadCriteoFile(const std::string& path,
                                          const CriteoReadOptions& options) {
  if (options.num_embeddings.size() != kCriteoSparse)
    return absl::InvalidArgumentError(absl::StrCat("expected ", kCriteoSparse, " table sizes, got ",
                                                   options.num_embeddings.size()));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
  LineReader reader(file);
  std::vector<int32_t> features;
  std::vector<float> labels;
  CriteoRows rows;
  std::string line;
  CriteoRow row;
  int64_t line_number = 0;
  int64_t count = 0;
  while ((options.max_rows == 0 || count < options.max_rows) && reader.Next(&line)) {
    ++line_number;
    if (line.empty() || (line.size() == 1 && line[0] == '\r')) continue;  // a blank line
    std::string problem = ParseCriteoLine(line, options.label_optional, &row);
    if (!problem.empty()) {
      if (options.bad_lines == BadLines::kSkip) {
        ++rows.skipped;
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": ", problem,
                       " (data.bad_lines=skip leaves such lines out and counts them)"));
    }
    size_t at = features.size();
    features.resize(at + kCriteoDense + kCriteoSparse);
    CriteoFeatures(row, options.num_embeddings, features.data() + at);
    labels.push_back(static_cast<float>(row.label));
    rows.line_numbers.push_back(line_number);
    ++count;
  }
  if (reader.error()) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated gzip data after line ",
                                            line_number, " (", reader.message(), ")"));
  }
  // The tensors own the vectors' memory (no copy of a large file's rows).
  auto* owned_features = new std::vector<int32_t>(std::move(features));
  auto* owned_labels = new std::vector<float>(std::move(labels));
  rows.features = torch::from_blob(
      owned_features->data(), {count, kCriteoDense + kCriteoSparse},
      [owned_features](void*) { delete owned_features; }, torch::kInt32);
  rows.labels = torch::from_blob(
      owned_labels->data(), {count}, [owned_labels](void*) { delete owned_labels; },
      torch::kFloat32);
  return rows;
}

}  // namespace kiln::recsys
