// The whole model from a checkpoint, by parameter name, for tests that compare trained weights (a
// sharded checkpoint's folder is joined as ReadCheckpoint joins it). Header-only: the tests that
// use it link kiln_engine; kiln_test_support stays free of LibTorch.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "lib/weights/checkpoint.h"

namespace kiln::testing {

inline std::map<std::string, torch::Tensor> CheckpointWeights(const std::string& ckpt) {
  torch::serialize::InputArchive archive;
  absl::Status read = ReadCheckpoint(ckpt, &archive);
  EXPECT_TRUE(read.ok()) << read;
  if (!read.ok()) return {};
  auto state = ReadModelState(archive, ckpt);
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *state : std::map<std::string, torch::Tensor>{};
}

}  // namespace kiln::testing
