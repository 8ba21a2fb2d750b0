// The predict loop (Lightning's _PredictionLoop): the prediction split through the task's
// predict step, without gradients; the outputs come back on the CPU, one tensor per batch.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"

namespace kiln {

class Trainer;

class PredictLoop {
 public:
  PredictLoop(Trainer& trainer, data::DataLoader& loader) : trainer_(trainer), loader_(loader) {}
  absl::StatusOr<std::vector<torch::Tensor>> Run();

 private:
  Trainer& trainer_;
  data::DataLoader& loader_;
};

}  // namespace kiln
