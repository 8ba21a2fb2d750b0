// The Trainer (Lightning's): what callbacks and commands talk to. Fit() trains a Task on a
// DataModule with an optimizer and an optional scheduler through the loops (fit_loop.h,
// training_epoch_loop.h, evaluation_loop.h); Evaluate() validates or tests, Predict() runs the
// model (predict_loop.h). The Trainer holds what the loops share: the options, callbacks and
// loggers, the strategy (device, precision, data parallelism: strategy.h), the counters
// (optimizer steps, micro-batches, samples, epochs, wall time) and stop requests; what a
// checkpoint holds is the checkpoint connector's (checkpoint_connector.h).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/core/exit_code.h"
#include "lib/data/datamodule.h"
#include "lib/trainer/callback.h"
#include "lib/trainer/checkpoint_connector.h"
#include "lib/trainer/optimization.h"
#include "lib/trainer/strategy.h"
#include "lib/trainer/task.h"
#include "lib/trainer/profiler.h"
#include "lib/trainer/trainer_options.h"

namespace kiln {

struct FitInputs {
  Task* task = nullptr;
  data::DataModule* data = nullptr;
  std::shared_ptr<OptimizerFactory> optimizer;
  std::shared_ptr<Scheduler> scheduler;  // may be null
  std::string ckpt_path;                 // "", "last", or a file
  uint64_t seed = 0;
  std::string config_yaml;               // the resolved job config, stored in checkpoints
  std::string model_name;                // e.g. "cnn", checked when resuming
};

class Trainer {
 public:
  Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks,
          std::vector<std::shared_ptr<MetricsLogger>> loggers);
  Trainer(const Trainer&) = delete;  // the strategy refers to the options
  Trainer& operator=(const Trainer&) = delete;

  // Trains data-parallel over `group` (one process per rank, see lib/distributed): each rank
  // reads its shard of the data, gradients are averaged, metrics are reduced, rank 0 logs and
  // writes checkpoints. Without a group (or with one rank) training is single-process.
  void set_process_group(std::shared_ptr<distributed::ProcessGroup> group) {
    strategy_.set_process_group(std::move(group));
  }
  absl::Status Fit(const FitInputs& inputs);
  // Evaluates on the validation ("val") or test ("test") split; returns the epoch means.
  absl::StatusOr<std::map<std::string, double>> Evaluate(Task& task, data::DataModule& data, data::Stage stage);
  absl::StatusOr<std::vector<torch::Tensor>> Predict(Task& task, data::DataModule& data);

  // Loads a checkpoint's model weights into `task` (for validate/test/predict/export).
  static absl::Status LoadWeights(const std::string& path, Task& task, const std::string& model_name);

  // --- read by callbacks ---
  const TrainerOptions& options() const { return options_; }
  // trainer.profiler=simple: the time per phase measured so far.
  const PhaseProfiler& profiler() const { return profiler_; }
  int global_rank() const;
  int world_size() const;
  bool is_global_zero() const { return global_rank() == 0; }
  int64_t global_step() const { return global_step_; }       // optimizer steps taken
  int64_t current_epoch() const { return epoch_; }
  int64_t micro_batches() const { return micro_batches_; }
  int64_t samples_seen() const { return samples_; }  // over all ranks
  double elapsed_seconds() const;
  int64_t train_batches_per_epoch() const { return train_batches_; }
  // Batches of the current epoch done so far (train_batches_per_epoch() at the epoch's end).
  int64_t batch_in_epoch() const { return batch_in_epoch_; }
  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  torch::optim::Optimizer* optimizer() const { return optimizer_.get(); }
  Task* task() const { return inputs_.task; }
  bool checkpointing_enabled() const { return checkpointing_ && options_.fast_dev_run == 0; }
  // A fit that must leave no checkpoint behind (lr_find's sweep): not even max_steps' last.ckpt.
  void set_checkpointing_enabled(bool enabled) { checkpointing_ = enabled; }
  // Where `ckpt_path=last` looks and interruption checkpoints go; ModelCheckpoint sets it.
  void set_checkpoint_dir(std::string dir) { checkpoint_dir_ = std::move(dir); }
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }
  // Sends metrics to every logger at the current optimizer step (LearningRateMonitor, Timer).
  void LogMetrics(const std::map<std::string, double>& metrics) { LogToLoggers(metrics); }
  // Asks the loop to stop at the end of this epoch (EarlyStopping); honours min_epochs.
  void RequestStop(const std::string& reason);
  // Asks the loop to stop after the current optimizer step (Timer with interval=step); writes a
  // resumable last.ckpt like max_steps does. Ignored before min_epochs.
  void RequestStopNow(const std::string& reason);
  // Writes the full training state. A failed write leaves what `path` held whole (a temporary
  // file is renamed into place) and is handed to CheckpointWriteFailed.
  absl::Status SaveCheckpoint(const std::string& path);
  // A checkpoint file (or the bookkeeping beside it) at `path` could not be written:
  // trainer.on_save_error=stop returns the error, one line that ends the fit;
  // continue logs it as one warning and returns OK, and the fit goes on without checkpoints
  // (checkpointing_enabled() is false from then on).
  absl::Status CheckpointWriteFailed(const std::string& path, const absl::Status& error);
  // Adds the named parameters to the optimizer (backbone_finetuning unfreezing them): in the
  // groups the optimizer config would make for them, at its lr times `lr_factor`; a scheduler
  // scales the new groups like the first one from then on. Logs what it added.
  absl::Status AddParamGroups(const std::vector<std::string>& names, double lr_factor);
  // Stops (or restarts) the scheduler's steps: a callback that sets the lrs itself from then on
  // (weight_averaging's swa). Not in checkpoints: the callback pauses it again when resuming.
  void PauseScheduler(bool paused) { scheduler_paused_ = paused; }
  bool scheduler_paused() const { return scheduler_paused_; }
  // Runs `fn` on each batch of one pass over the training data (the current epoch's order and
  // augmentations, on the device), outside training: weight_averaging's update_bn pass.
  absl::Status ForEachTrainingBatch(const std::function<absl::Status(data::Batch&)>& fn);

 private:
  friend class FitLoop;
  friend class TrainingEpochLoop;
  friend class EvaluationLoop;
  friend class PredictLoop;

  absl::Status ResumeFrom(const std::string& path);
  // What the checkpoint connector saves and restores.
  FitParts Parts() const;
  absl::Status ForEachCallback(const std::function<absl::Status(Callback&)>& fn);
  void LogToLoggers(const std::map<std::string, double>& metrics);
  // Runs `fn` on each logger. A logger that fails (a full disk, an I/O error) is reported in one
  // warning line and left out for the rest of the run, which goes on: metrics are not worth a run.
  void ForEachLogger(const std::function<absl::Status(MetricsLogger&)>& fn);
  bool OutOfTime() const;
  // Maps a mid-epoch position written at another world size or batch size to this run's.
  absl::Status AdaptPosition(int64_t saved_world_size, int64_t saved_batch_size, const std::string& path);

  TrainerOptions options_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<MetricsLogger>> loggers_;
  FitInputs inputs_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Strategy strategy_{options_};
  PhaseProfiler profiler_{options_.profiler == TrainerOptions::ProfilerKind::kSimple};
  std::unique_ptr<OperatorTrace> operator_trace_;  // trainer.profiler=advanced, during fit

  int64_t global_step_ = 0, epoch_ = 0, batch_in_epoch_ = 0, micro_batches_ = 0, samples_ = 0;
  int64_t train_batches_ = 0;
  double elapsed_before_ = 0;  // wall time of earlier runs of a resumed fit
  std::chrono::steady_clock::time_point start_;
  std::map<std::string, double> callback_metrics_;
  MetricLog train_log_;
  bool stop_requested_ = false;
  bool scheduler_paused_ = false;
  bool checkpointing_ = true;
  data::DataLoader* train_loader_ = nullptr;  // while fitting
  bool stop_now_ = false;
  std::string stop_reason_;
  std::string checkpoint_dir_;
  int stop_signal_ = 0;      // the signal every rank agreed to stop for
  int64_t batch_size_ = 0;  // per rank
};

}  // namespace kiln
