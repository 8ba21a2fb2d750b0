// One MNIST-style IDX file (gzip-compressed or raw) of unsigned bytes, read with errors that name
// the file: what the idx_images data module loads, and what fuzz/idx_fuzzer.cc feeds any bytes.
#pragma once

#include <torch/torch.h>

#include <string>

#include "absl/status/statusor.h"

namespace kiln::data {

// The uint8 tensor [N, dims...] of the IDX file at `path`, which must have `expected_dims`
// dimensions and element type unsigned byte (0x08); a bad magic number, another type, a header
// whose sizes do not match the data (or overflow) is an error naming the file.
absl::StatusOr<torch::Tensor> ReadIdx(const std::string& path, int expected_dims);

}  // namespace kiln::data
