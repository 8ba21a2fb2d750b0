// Reads Criteo-format click files (TSV, or gzip of it: components/recsys/criteo_line.h says what a
// line is) line by line into compact rows: each categorical hash taken modulo its table's size,
// the integer features as counts (the model takes log(1 + x)). A bad line is skipped and counted,
// or refused naming file:line and what is wrong, as `bad_lines` says.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "components/recsys/criteo_line.h"

namespace kiln::recsys {

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
