// The Trainer (Lightning's): what callbacks and commands talk to. Fit() trains a Task on a
// DataModule with an optimizer and an optional scheduler through the loops (internal/fit_loop.h,
// internal/training_epoch_loop.h, internal/evaluation_loop.h); Evaluate() validates or tests,
// Predict() runs the model (internal/predict_loop.h). The Trainer keeps its options, the
// callbacks and loggers (through their connectors), the strategy (device, precision, data
// parallelism: strategy.h) and the fit's state (connectors/loop_state.h: progress counters, stop
// requests, the optimizer), and hands the loops a LoopContext; what a checkpoint holds is the
// checkpoint connector's (connectors/checkpoint_connector.h).
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
#include "lib/base/exit_code.h"
#include "lib/data/datamodule.h"
#include "lib/trainer/callback.h"
#include "lib/trainer/fit_inputs.h"
#include "lib/trainer/optimization.h"
#include "lib/trainer/profiler.h"
#include "lib/trainer/strategy.h"
#include "lib/trainer/task.h"
#include "lib/trainer/trainer_options.h"

namespace kiln {

struct LoopContext;
struct TrainerParts;

class Trainer {
 public:
  Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks,
          std::vector<std::shared_ptr<MetricsLogger>> loggers);
  Trainer(const Trainer&) = delete;  // the strategy refers to the options
  Trainer& operator=(const Trainer&) = delete;
  ~Trainer();

  // Trains data-parallel over `group` (one process per rank, see lib/distributed): each rank
  // reads its shard of the data, gradients are averaged, metrics are reduced, rank 0 logs and
  // writes checkpoints. Without a group (or with one rank) training is single-process.
  // Whether fit ends with the whole model on every rank (true, the default: testing, prediction
  // and export read it whole). False leaves sharded tables and fsdp's pieces as they are, for a
  // run that only trains a model larger than one worker's memory.
  void set_whole_model_after_fit(bool whole) { strategy_.set_whole_model_after_fit(whole); }
  void set_process_group(std::shared_ptr<distributed::ProcessGroup> group) {
    strategy_.set_process_group(std::move(group));
  }
  absl::Status Fit(const FitInputs& inputs);
  // Evaluates on the validation ("val") or test ("test") split; returns the epoch means.
  absl::StatusOr<std::map<std::string, double>> Evaluate(Task& task, data::DataModule& data,
                                                         data::Stage stage);
  absl::StatusOr<std::vector<torch::Tensor>> Predict(Task& task, data::DataModule& data);

  // Loads a checkpoint's model weights into `task` (for validate/test/predict/export).
  static absl::Status LoadWeights(const std::string& path, Task& task,
                                  const std::string& model_name);

  // --- read by callbacks ---
  const TrainerOptions& options() const { return options_; }
  // trainer.profiler=simple: the time per phase measured so far.
  const PhaseProfiler& profiler() const { return profiler_; }
  int global_rank() const;
  int world_size() const;
  bool is_global_zero() const { return global_rank() == 0; }
  int64_t global_step() const;  // optimizer steps taken
  int64_t current_epoch() const;
  int64_t micro_batches() const;
  int64_t samples_seen() const;  // over all ranks
  double elapsed_seconds() const;
  int64_t train_batches_per_epoch() const;
  // Batches of the current epoch done so far (train_batches_per_epoch() at the epoch's end).
  int64_t batch_in_epoch() const;
  const std::map<std::string, double>& callback_metrics() const;
  torch::optim::Optimizer* optimizer() const;
  Task* task() const;
  bool checkpointing_enabled() const;
  // A fit that must leave no checkpoint behind (lr_find's sweep): not even max_steps' last.ckpt.
  void set_checkpointing_enabled(bool enabled);
  // Where `ckpt_path=last` looks and interruption checkpoints go; ModelCheckpoint sets it.
  void set_checkpoint_dir(std::string dir);
  const std::string& checkpoint_dir() const;
  // Sends metrics to every logger at the current optimizer step (LearningRateMonitor, Timer).
  void LogMetrics(const std::map<std::string, double>& metrics);
  // Asks the loop to stop at the end of this epoch (EarlyStopping); honours min_epochs.
  void RequestStop(const std::string& reason);
  // Asks the loop to stop after the current optimizer step (Timer with interval=step); writes a
  // resumable last.ckpt like max_steps does. Before min_epochs it is ignored, said once in the log.
  void RequestStopNow(const std::string& reason);
  // Writes the full training state. A failed write leaves what `path` held whole (a temporary
  // file is renamed into place) and is handed to CheckpointWriteFailed.
  absl::Status SaveCheckpoint(const std::string& path);
  // trainer.strategy=fsdp: every rank writes its piece (lib/weights/sharded_checkpoint.h).
  absl::Status SaveShardedCheckpoint(const std::string& path);
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
  void PauseScheduler(bool paused);
  bool scheduler_paused() const;
  // Runs `fn` on each batch of one pass over the training data (the current epoch's order and
  // augmentations, on the device), outside training: weight_averaging's update_bn pass.
  absl::Status ForEachTrainingBatch(const std::function<absl::Status(data::Batch&)>& fn);

 private:
  // What the loops are handed: this Trainer's public face and its parts.
  LoopContext Context();

  TrainerOptions options_;
  PhaseProfiler profiler_{options_.profiler == TrainerOptions::ProfilerKind::kSimple};
  Strategy strategy_{options_};
  // The connectors and the fit's state (connectors/loop_state.h): the loops' side, not the face.
  std::unique_ptr<TrainerParts> parts_;
};

}  // namespace kiln
