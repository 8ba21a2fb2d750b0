// CIFAR-10 / CIFAR-100 binary batch files (gzip-compressed or raw): fixed-size records of label
// byte(s) then a 32x32 RGB image stored channel by channel. What the cifar data module loads, and
// what fuzz/cifar_fuzzer.cc feeds any bytes.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::data {

struct CifarRecordLayout {
  int64_t label_bytes = 1;   // CIFAR-100 records start with the coarse then the fine label
  int64_t label_offset = 0;  // which label byte is the class
  int64_t num_classes = 10;
};

// The images uint8 [N, 3, 32, 32] and labels int64 [N] of the files at `paths`, in order. A file
// that is empty, not a whole number of records, or has a label outside 0..num_classes-1 is an
// error naming it.
absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> ReadCifarBatches(
    const std::vector<std::string>& paths, const CifarRecordLayout& layout);

}  // namespace kiln::data
