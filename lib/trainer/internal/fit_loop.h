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
  absl::Status Run(const FitInputs& inputs);

 private:
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
