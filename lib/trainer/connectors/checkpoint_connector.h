// What a fit saves so that it can continue exactly, and how that is restored (Lightning's
// checkpoint connector): the model (refusing another model's checkpoint), the optimizer and
// scheduler, the loop's counters and position, the CPU random generator, each callback's state
// under its state key, and the run's metadata (model name, resolved config, versions). The
// Trainer decides when to save and resume; this file decides what a checkpoint holds.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/trainer/callback.h"
#include "lib/trainer/grad_scaler.h"
#include "lib/trainer/optimization.h"
#include "lib/trainer/task.h"

namespace kiln {

// Where the loop is, as a checkpoint records it.
struct LoopPosition {
  int64_t global_step = 0, epoch = 0, batch_in_epoch = 0, micro_batches = 0, samples = 0;
  double elapsed_seconds = 0;
  int64_t seed = 0;
  int64_t world_size = 1;  // the ranks and per-rank batch size the position was counted in
  int64_t batch_size = 0;
};

// The parts of a fit that a checkpoint saves and restores.
struct FitParts {
  Task* task = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;  // may be null (only weights)
  Scheduler* scheduler = nullptr;                // may be null
  GradScaler* scaler = nullptr;                  // 16-mixed's loss scale; null otherwise
  const std::vector<std::shared_ptr<Callback>>* callbacks = nullptr;
  std::string model_name;     // "cnn": a checkpoint of another model is refused
  std::string config_yaml;    // the resolved job config, kept for the record
  std::string frozen_digest;  // non-empty (LoRA on a base from a file): the trained tensors alone
};

// `extra` adds keys of its own (a sharded checkpoint's piece says whose it is).
absl::Status SaveFitCheckpoint(
    const std::string& path, const FitParts& parts, const LoopPosition& loop,
    const std::function<void(torch::serialize::OutputArchive&)>& extra = nullptr);

// Restores `parts` from `path` and returns the saved position. `place_module` runs after the
// weights load and before the optimizer's state does (it finds the parameters on their device);
// `callbacks_restored` runs after the callbacks' states load, before the optimizer's and the
// scheduler's (Callback::OnLoadCheckpoint).
// A checkpoint without a batch size (older ones) counts in `batch_size`.
absl::StatusOr<LoopPosition> RestoreFitCheckpoint(
    const std::string& path, const FitParts& parts,
    const std::function<void(torch::nn::Module&)>& place_module,
    const std::function<absl::Status()>& callbacks_restored, int64_t batch_size);

// Only the weights, into `task`'s model (evaluation, export, testing the best checkpoint).
absl::Status LoadCheckpointWeights(const std::string& path, Task& task,
                                   const std::string& model_name);

}  // namespace kiln
