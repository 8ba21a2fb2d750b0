// The training-epoch loop (Lightning's _TrainingEpochLoop with its automatic optimization): one
// epoch of training batches — forward and backward under the strategy, gradient accumulation,
// clipping, the optimizer and per-step scheduler steps, mid-epoch validation, and the stop
// checks at each optimizer step; at the epoch's end the epoch means, the task's training metrics
// over the whole epoch (Task::TrainingEpochEnd), validation, the per-epoch scheduler step and the
// epoch's log line.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"
#include "lib/trainer/connectors/loop_state.h"
#include "lib/trainer/internal/training_step.h"

namespace kiln {

class EvaluationLoop;

class TrainingEpochLoop {
 public:
  // `validation` may be null (no validation split).
  TrainingEpochLoop(LoopContext ctx, data::DataLoader& loader, EvaluationLoop* validation)
      : ctx_(ctx), loader_(loader), validation_(validation) {}

  // Runs the current epoch from the trainer's batch position. Returns true when training
  // stopped inside the epoch (a signal, max_steps, max_time, a callback asking to stop now).
  absl::StatusOr<bool> Run();

 private:
  // One micro-batch: to the device, the callbacks' OnTrainBatchStart, then the fit's step protocol
  // (forward, backward, and at an accumulation boundary the optimizer step).
  absl::Status Advance(data::Batch& batch, bool last_in_epoch);
  // Agrees with the other ranks on whether to stop after this optimizer step.
  absl::StatusOr<bool> StopAfterThisStep();
  absl::Status EndEpoch(double seconds, int64_t samples_at_start);

  LoopContext ctx_;
  int64_t skipped_steps_logged_ = 0;  // 16-mixed: optimizer steps skipped, as last logged
  data::DataLoader& loader_;
  EvaluationLoop* validation_;
  std::unique_ptr<AutomaticOptimization> step_;  // chosen at the first epoch
};

}  // namespace kiln
