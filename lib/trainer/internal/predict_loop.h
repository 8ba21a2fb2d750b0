// The predict loop (Lightning's _PredictionLoop): the prediction split through the task's
// predict step, without gradients; the outputs come back on the CPU, one tensor per batch.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"
#include "lib/trainer/connectors/loop_state.h"

namespace kiln {

class PredictLoop {
 public:
  PredictLoop(LoopContext ctx, data::DataLoader& loader) : ctx_(ctx), loader_(loader) {}
  absl::StatusOr<std::vector<torch::Tensor>> Run();

 private:
  LoopContext ctx_;
  data::DataLoader& loader_;
};

}  // namespace kiln
