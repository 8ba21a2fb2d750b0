// The fit loop (Lightning's _FitLoop): sets a fit up — data loaders (shuffled, sharded over
// ranks, overfit_batches), the optimizer and scheduler, resuming from a checkpoint, data
// parallelism, the sanity check — then runs training epochs until max_epochs, max_steps,
// max_time, a stop request or a signal, and ends with an interruption checkpoint or the fit-end
// callbacks.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"
#include "lib/trainer/connectors/loop_state.h"
#include "lib/trainer/internal/evaluation_loop.h"

namespace kiln {

class FitLoop {
 public:
  explicit FitLoop(LoopContext ctx);
  ~FitLoop();
  // The fit in Lightning's order: Setup, ConfigureOptimizers, Start (with resuming), the sanity
  // check, Announce, RunEpochs, Finish.
  absl::Status Run(const FitInputs& inputs);

 private:
  // What Setup works out for the phases after it.
  struct Plan {
    int threads = 1;            // per rank
    int64_t train_samples = 0;  // in the training split
    int64_t max_epochs = 0;
    int64_t steps_per_epoch = 0;
    int64_t total_steps = 0;  // what the scheduler plans for
  };
  // The process (threads, determinism, the seed), the device, the data and the batch counts.
  absl::StatusOr<Plan> Setup(const FitInputs& inputs);
  // The module on its device, the callbacks' OnSetup, the optimizer over the trainable
  // parameters (frozen ones stay out) and the scheduler.
  absl::Status ConfigureOptimizers(const FitInputs& inputs, const Plan& plan);
  // The callbacks' OnFitStart, stale temporary files removed, resuming from a checkpoint, data
  // parallelism set up; true when the fit resumed.
  absl::StatusOr<bool> Start(const FitInputs& inputs);
  // The fit's log line (device, threads, sizes) and the advanced profiler's trace.
  absl::Status Announce(const Plan& plan);
  // Training epochs until max_epochs, max_steps, max_time or a stop request.
  absl::Status RunEpochs(int64_t max_epochs);
  // After the loop: the profiles, a signal's interruption checkpoint, and the fit-end callbacks
  // and loggers (or OnException when `status` failed).
  absl::Status Finish(absl::Status status);
  // The training loader (shuffled, sharded over ranks) and the validation loop, if the data has
  // a validation split; returns the training split's size.
  absl::StatusOr<int64_t> SetupData(const FitInputs& inputs);
  // trainer.profiler: the simple profiler's table, the advanced one's trace file.
  void ReportProfiles();
  // Resumes from inputs.ckpt_path ("last", "best" refused, or a file); true when it did.
  absl::StatusOr<bool> Restore(const FitInputs& inputs);
  // After the loop: a signal becomes an interruption checkpoint and the signal's exit code.
  absl::Status Interrupted(int signal);
  // Checkpoint and resume: the state a checkpoint at `path` holds, restored into this fit.
  absl::Status ResumeFrom(const std::string& path);
  // Maps a mid-epoch position written at another world size or batch size to this run's.
  absl::Status AdaptPosition(int64_t saved_world_size, int64_t saved_batch_size,
                             const std::string& path);

  LoopContext ctx_;
  std::unique_ptr<data::DataLoader> train_loader_, val_loader_;
  std::unique_ptr<EvaluationLoop> validation_;
};

}  // namespace kiln
