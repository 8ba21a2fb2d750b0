// Reads Criteo-format click files (TSV, or gzip of it: components/recsys/criteo_line.h says what a
// line is) line by line into compact rows: each categorical hash taken modulo its table's size,
// the integer features as counts (the model takes log(1 + x)). A bad line is skipped and counted,
// or refused naming file:line and what is wrong, as `bad_lines` says.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "components/recsys/criteo_line.h"

struct gzFile_s;  // zlib's file handle

namespace kiln::recsys {

// A Criteo file read line by line: plain text, or gzip of it (zlib reads either).
class CriteoLineReader {
 public:
  // NotFound for a missing file (or a folder), PermissionDenied for one that cannot be opened.
  static absl::StatusOr<std::unique_ptr<CriteoLineReader>> Open(const std::string& path);
  ~CriteoLineReader();
  CriteoLineReader(const CriteoLineReader&) = delete;
  CriteoLineReader& operator=(const CriteoLineReader&) = delete;

  // The next line without its '\n'; false at the end, or at a damaged or cut gzip stream (then
  // status() says so, naming the file; a cut stream's partial last line is not handed out).
  bool Next(std::string* line);
  // The number of the line Next last handed out (from 1).
  int64_t line_number() const { return line_number_; }
  const absl::Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  CriteoLineReader(std::string path, gzFile_s* file);
  std::string path_;
  gzFile_s* file_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;
  int64_t line_number_ = 0;
  absl::Status status_;
};

// A blank line ("" or "\r") holds no row and is passed over.
bool IsBlankLine(std::string_view line);

// The error for a bad line under bad_lines=error: "PATH:LINE: PROBLEM (data.bad_lines=skip ...)".
absl::Status BadLineError(const std::string& path, int64_t line_number, const std::string& problem);

// The rows a file holds (its lines but the blank ones), at most `max_rows` (0: all); the file is
// read through once.
absl::StatusOr<int64_t> CountCriteoRows(const std::string& path, int64_t max_rows);

enum class BadLines { kSkip, kError };

struct CriteoReadOptions {
  std::vector<int64_t> num_embeddings;  // one table size per categorical feature (26), < 2^31
  BadLines bad_lines = BadLines::kError;
  bool label_optional = false;  // prediction input: lines of 39 fields (no label) too
  int64_t max_rows = 0;         // 0: every row
};

// The rows of a file: `features` int32 [N, 39], the 13 integer counts then the 26 table indices
// (a batch's input is these as int64); `labels` float [N] (-1 where a prediction line had none);
// each row's line number in the file.
struct CriteoRows {
  torch::Tensor features;
  torch::Tensor labels;
  std::vector<int64_t> line_numbers;
  int64_t skipped = 0;  // bad lines left out (bad_lines: skip)
};

// The features of one parsed line, as a row of CriteoRows::features.
void CriteoFeatures(const CriteoRow& row, const std::vector<int64_t>& num_embeddings, int32_t* out);

absl::StatusOr<CriteoRows> ReadCriteoFile(const std::string& path,
                                          const CriteoReadOptions& options);

}  // namespace kiln::recsys
