// The evaluation loop (Lightning's _EvaluationLoop): runs a split through the task's evaluation
// step without gradients and returns the epoch means — the sanity check before training, the
// validation inside fit, and the validate/test commands.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"
#include "lib/trainer/connectors/loop_state.h"

namespace kiln {

class EvaluationLoop {
 public:
  // `stage` names the metrics: "val" or "test".
  EvaluationLoop(LoopContext ctx, data::DataLoader& loader, std::string stage)
      : ctx_(ctx), loader_(loader), stage_(std::move(stage)) {}

  // The epoch's values over up to `max_batches` batches: the means of what the steps logged,
  // averaged over ranks, and the task's metrics (Task::EvaluationEnd, state summed over ranks);
  // no callbacks, nothing logged. With `stop_on_signal`, a stop signal (StopSignals) ends it
  // between batches with CheckStopSignal's error (the commands; a fit stops after validating).
  absl::StatusOr<std::map<std::string, double>> RunBatches(int64_t max_batches,
                                                           bool stop_on_signal = false);
  // Validation inside fit: callbacks around it, values kept as callback metrics and logged.
  absl::Status Validate();
  // The validate/test commands: logged, test callbacks called, printed.
  absl::StatusOr<std::map<std::string, double>> Evaluate();

 private:
  // The batches this stage runs: its limit_*_batches, and fast_dev_run.
  int64_t MaxBatches() const;

  LoopContext ctx_;
  data::DataLoader& loader_;
  std::string stage_;
};

}  // namespace kiln
