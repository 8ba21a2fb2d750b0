// Stopping on SIGINT, SIGTERM and SIGUSR1 (what SLURM sends before preempting a job) at a point
// of kiln's choosing instead of wherever the signal lands: a fit after its step (with a resumable
// checkpoint), validate/test/predict between batches, export before it writes, kiln shard between
// samples, a sweep once its running jobs have stopped.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kiln {

// Installs the stop handlers for its lifetime, then restores the previous ones. Received() is the
// signal that asked to stop, 0 while none did. The outermost StopSignals starts afresh; one
// inside it (a command's, then its Predictor's) keeps a signal that already arrived.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static int Received();
  // How many stop signals have arrived since the process started: one who passes each signal on
  // (the trainer.devices launcher to its workers) compares it with the count it last saw, and
  // Received() is the latest of them.
  static uint64_t Count();

 private:
  struct Saved;
  Saved* saved_;
};

// "SIGINT", "SIGTERM" or "SIGUSR1".
const char* StopSignalName(int signal);

// OK while no stop signal has arrived (StopSignals installed); else Cancelled "stopped by SIGINT
// `doing`", carrying the exit code 128 + the signal (130 for SIGINT, 143 for SIGTERM).
absl::Status CheckStopSignal(const std::string& doing);

}  // namespace kiln
