#include "components/recsys/criteo_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace kiln::recsys {
absl::StatusOr<std::unique_ptr<CriteoLineReader>> CriteoLineReader::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
  return std::unique_ptr<CriteoLineReader>(new CriteoLineReader(path, file));
}

CriteoLineReader::CriteoLineReader(std::string path, gzFile_s* file)
    : path_(std::move(path)), file_(file), buffer_(1 << 16) {}

CriteoLineReader::~CriteoLineReader() { gzclose(file_); }

bool CriteoLineReader::Next(std::string* line) {
  line->clear();
  while (true) {
    if (pos_ == end_) {
      int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
      if (n <= 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) {
          // A damaged or cut stream: its partial last line is not handed out as a line.
          status_ = absl::DataLossError(
              absl::StrCat(path_, ": corrupt or truncated gzip data after line ", line_number_,
                           " (", message ? message : "", ")"));
          return false;
        }
        if (line->empty()) return false;
        ++line_number_;
        return true;
      }
      pos_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const char* start = buffer_.data() + pos_;
    const void* newline = memchr(start, '\n', end_ - pos_);
    if (newline != nullptr) {
      size_t len = static_cast<size_t>(static_cast<const char*>(newline) - start);
      line->append(start, len);
      pos_ += len + 1;
      ++line_number_;
      return true;
    }
    line->append(start, end_ - pos_);
    pos_ = end_;
  }
}

bool IsBlankLine(std::string_view line) { return line.empty() || line == "\r"; }

absl::Status BadLineError(const std::string& path, int64_t line_number,
                          const std::string& problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ":", line_number, ": ", problem,
                   " (data.bad_lines=skip leaves such lines out and counts them)"));
}

absl::StatusOr<int64_t> CountCriteoRows(const std::string& path, int64_t max_rows) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<CriteoLineReader> reader, CriteoLineReader::Open(path));
  std::string line;
  int64_t rows = 0;
  while ((max_rows == 0 || rows < max_rows) && reader->Next(&line)) {
    if (!IsBlankLine(line)) ++rows;
  }
  KILN_RETURN_IF_ERROR(reader->status());
  return rows;
}

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
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<CriteoLineReader> reader, CriteoLineReader::Open(path));
  std::vector<int32_t> features;
  std::vector<float> labels;
  CriteoRows rows;
  std::string line;
  CriteoRow row;
  int64_t count = 0;
  while ((options.max_rows == 0 || count < options.max_rows) && reader->Next(&line)) {
    if (IsBlankLine(line)) continue;
    std::string problem = ParseCriteoLine(line, options.label_optional, &row);
    if (!problem.empty()) {
      if (options.bad_lines == BadLines::kSkip) {
        ++rows.skipped;
        continue;
      }
      return BadLineError(path, reader->line_number(), problem);
    }
    size_t at = features.size();
    features.resize(at + kCriteoDense + kCriteoSparse);
    CriteoFeatures(row, options.num_embeddings, features.data() + at);
    labels.push_back(static_cast<float>(row.label));
    rows.line_numbers.push_back(reader->line_number());
    ++count;
  }
  KILN_RETURN_IF_ERROR(reader->status());
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
