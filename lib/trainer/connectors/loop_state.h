// What the loops (internal/fit_loop.h, ...) share while a fit, an evaluation or a prediction runs,
// and the connectors through which they reach callbacks, loggers and the data: Lightning's
// progress objects and trainer connectors (trainer/connectors/). The Trainer holds them behind
// its face (trainer.h does not include this header, which is not installed) and hands the loops a
// LoopContext; callbacks and commands read them through the Trainer's public accessors. No loop
// is the Trainer's friend.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/data/datamodule.h"
#include "lib/data/loader.h"
#include "lib/trainer/callback.h"
#include "lib/trainer/connectors/checkpoint_connector.h"
#include "lib/trainer/fit_inputs.h"
#include "lib/trainer/metric_log.h"
#include "lib/trainer/optimization.h"
#include "lib/trainer/profiler.h"
#include "lib/trainer/strategy.h"
#include "lib/trainer/task.h"
#include "lib/trainer/trainer_options.h"

namespace kiln {

class Trainer;

// The fit's progress (Lightning's progress objects): the counters the loops advance and a
// checkpoint keeps (LoopPosition).
struct FitProgress {
  int64_t global_step = 0;  // optimizer steps taken
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;  // batches of the current epoch done
  int64_t micro_batches = 0;
  int64_t samples = 0;        // over all ranks
  int64_t train_batches = 0;  // per epoch
  int64_t batch_size = 0;     // per rank
  double elapsed_before = 0;  // wall time of earlier runs of a resumed fit
  std::chrono::steady_clock::time_point start;

  double elapsed_seconds() const {
    return elapsed_before +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // What a checkpoint keeps of it, with the fit's seed and world size, and the way back (the
  // batch size stays this run's: the fit loop adapts the position to it).
  LoopPosition Position(uint64_t seed, int world_size) const;
  void Restore(const LoopPosition& loop);
};

// Requests to stop: from callbacks (EarlyStopping, Timer), limits and signals.
struct StopState {
  bool requested = false;  // at the end of this epoch
  bool now = false;        // after this optimizer step
  std::string reason;
  int signal = 0;              // the signal every rank agreed to stop for
  bool deferred_said = false;  // a stop-now before min_epochs was logged (once a fit)
};

// What a fit holds while it runs (and what remains of it after, for callbacks and commands).
struct FitState {
  FitInputs inputs;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  FitProgress progress;
  StopState stop;
  bool scheduler_paused = false;
  bool checkpointing = true;
  std::string checkpoint_dir;
  data::DataLoader* train_loader = nullptr;       // while fitting
  std::unique_ptr<OperatorTrace> operator_trace;  // trainer.profiler=advanced, during fit
};

// The callbacks, in the order their hooks run (as listed, those that run last after the others:
// checkpointing), each hook's time counted by the simple profiler.
class CallbackConnector {
 public:
  CallbackConnector(std::vector<std::shared_ptr<Callback>> callbacks, PhaseProfiler& profiler);
  absl::Status ForEach(const std::function<absl::Status(Callback&)>& fn);
  // Every callback's OnException (a failed fit), whatever each does.
  void OnException(Trainer& trainer, const absl::Status& status);
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }

 private:
  std::vector<std::shared_ptr<Callback>> callbacks_;
  PhaseProfiler& profiler_;
};

// Metrics to the loggers and the callbacks: the loggers (one that fails is reported in one
// warning and left out for the rest of the run, which goes on: metrics are not worth a run), the
// callback metrics, and what the training steps log.
class LoggerConnector {
 public:
  LoggerConnector(std::vector<std::shared_ptr<MetricsLogger>> loggers, PhaseProfiler& profiler);
  // Sends `metrics` at optimizer step `step` to every logger (rank 0 only: the others pass
  // `global_zero` false).
  void Log(const std::map<std::string, double>& metrics, int64_t step, bool global_zero);
  void ForEach(const std::function<absl::Status(MetricsLogger&)>& fn);
  std::map<std::string, double>& callback_metrics() { return callback_metrics_; }
  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  MetricLog& train_log() { return train_log_; }

 private:
  std::vector<std::shared_ptr<MetricsLogger>> loggers_;
  PhaseProfiler& profiler_;
  std::map<std::string, double> callback_metrics_;
  MetricLog train_log_;
};

// The data side of every loop (Lightning's data connector): `data` told the device, prepared and
// set up for `stage`, and the split `which` gives, or FailedPrecondition naming `missing`
// ("training split", ...).
absl::StatusOr<std::shared_ptr<const data::Dataset>> SetUpSplit(
    data::DataModule& data, data::Stage stage, torch::Device device,
    const std::function<std::shared_ptr<const data::Dataset>(data::DataModule&)>& which,
    const std::string& missing);
// A loader over `dataset` in its order (evaluation and prediction), with the module's options.
std::unique_ptr<data::DataLoader> InOrderLoader(std::shared_ptr<const data::Dataset> dataset,
                                                const data::DataModule& data);

// The loops' handle: the Trainer's public face (what callbacks are handed) and the parts the
// loops work with.
struct LoopContext {
  Trainer& trainer;
  const TrainerOptions& options;
  Strategy& strategy;
  PhaseProfiler& profiler;
  CallbackConnector& callbacks;
  LoggerConnector& logging;
  FitState& state;

  // Rank 0 sends `metrics` to the loggers at the current optimizer step.
  void Log(const std::map<std::string, double>& metrics) const;
  // What a checkpoint of this fit holds.
  FitParts Parts() const;
  bool OutOfTime() const;
};

}  // namespace kiln
