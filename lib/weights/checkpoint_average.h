// Checkpoint averaging (fairseq's average_checkpoints.py, `kiln average`): the element-wise mean
// of the model weights of several checkpoints of one model, written as a checkpoint that
// validate/test/predict/export and `model.init_from` read like any other.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

struct AveragedWeights {
  std::map<std::string, torch::Tensor> state;
  std::string model_name;     // meta/model of the checkpoints
  std::string config;         // meta/config of the last one
  std::string frozen_digest;  // LoRA adapters alone: the frozen weights they go with (checkpoint.h)
};

// Floating-point entries (weights, BatchNorm running means and variances) are averaged in
// float64 and stored in their own type; integer entries (BatchNorm's num_batches_tracked) keep
// the value of the last checkpoint listed, the newest when the list is in training order.
// Checkpoints of different models (model name, entry names or shapes) are refused in one line.
absl::StatusOr<AveragedWeights> AverageCheckpoints(const std::vector<std::string>& paths);

// The `n` checkpoints of `run_dir` (its checkpoints/ folder, or itself) with the most optimizer
// steps, oldest first; last.ckpt is left out (it repeats one of them).
absl::StatusOr<std::vector<std::string>> NewestCheckpoints(const std::string& run_dir, int64_t n);

// Writes the averaged model as a weights-only checkpoint (no optimizer or loop state).
absl::Status WriteAveragedCheckpoint(const std::string& path, const AveragedWeights& averaged,
                                     const std::vector<std::string>& sources);

}  // namespace kiln
