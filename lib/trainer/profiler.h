// trainer.profiler (Lightning's names). `simple`: wall time per phase of training (data, forward,
// backward, optimizer, callbacks, logging, validation), each phase counting its own time only (a
// callback run inside the optimizer step counts as callbacks), as a table at the end of fit.
// `advanced`: LibTorch's operator profiler (the legacy, kineto-less one of
// torch::autograd::profiler) over a window of training batches, written as a Chrome trace JSON that
// chrome://tracing and ui.perfetto.dev open.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lib/trainer/trainer_options.h"

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace kiln {

class PhaseProfiler {
 public:
  enum Phase { kData, kForward, kBackward, kOptimizer, kCallbacks, kLogging, kValidation, kPhases };

  explicit PhaseProfiler(bool enabled = false) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }

  // Times `phase` for its lifetime; a nested scope pauses the one around it.
  class Scope {
   public:
    Scope(PhaseProfiler& profiler, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseProfiler* profiler_;  // null when disabled
  };

  // Adds time measured elsewhere (the wait for the next batch).
  void Add(Phase phase, double seconds, int64_t calls = 1);
  double seconds(Phase phase) const { return seconds_[phase]; }
  int64_t calls(Phase phase) const { return calls_[phase]; }

  // The table: one line per phase with calls, total seconds, mean milliseconds and share of
  // `total_seconds` (fit's wall time), and the rest as "other".
  std::vector<std::string> Report(double total_seconds) const;
  static const char* Name(Phase phase);

 private:
  using Clock = std::chrono::steady_clock;
  void Push(Phase phase);
  void Pop();

  bool enabled_;
  std::array<double, kPhases> seconds_{};
  std::array<int64_t, kPhases> calls_{};
  std::vector<Phase> stack_;
  Clock::time_point since_;  // when the innermost phase last resumed
};

// The operator profile of training batches [first, first + count) of the run (counted from 0),
// written to `path` when the window closes (or the run ends).
class OperatorTrace {
 public:
  OperatorTrace(std::string path, int64_t first, int64_t count)
      : path_(std::move(path)), first_(first), count_(count) {}
  ~OperatorTrace();
  // Before and after training batch `n` (counted over the run from 0).
  void BeforeBatch(int64_t n);
  void AfterBatch(int64_t n);
  // Ends the recording (if on) and writes the file; true when a trace has been written.
  bool Finish();
  const std::string& path() const { return path_; }
  int64_t first() const { return first_; }
  int64_t count() const { return count_; }

 private:
  std::string path_;
  int64_t first_, count_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;
  bool written_ = false;
};

}  // namespace kiln
