// Weights in the safetensors format (a JSON header, then raw little-endian tensors), so a model
// trained in kiln loads in Python PyTorch and weights trained in Python load here.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

// Writes tensors (any of F32, F64, F16, BF16, I64, I32, I16, I8, U8, BOOL) atomically.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});
// Reads every tensor; a malformed file is a one-line error naming it.
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadSafetensors(const std::string& path);

// A module's parameters and buffers under their PyTorch names (what torch's state_dict holds).
std::vector<std::pair<std::string, torch::Tensor>> StateDict(torch::nn::Module& module);

}  // namespace kiln
