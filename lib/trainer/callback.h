// Callbacks hook into the training loop at Lightning's points; they run in list order, before
// the task's own hooks, with checkpointing last. Built by name from the `callbacks` config
// mapping through Registry<Callback>.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/data/loader.h"

namespace kiln {

class Trainer;

class Callback {
 public:
  static constexpr const char* kKind = "callback";
  virtual ~Callback() = default;

  // Runs after every other callback (ModelCheckpoint does).
  virtual bool runs_last() const { return false; }
  // Where this callback's state sits in a checkpoint (Lightning's state_key): its type, plus
  // the options that tell two callbacks of that type apart. A resumed run finds each
  // callback's state by it, whatever the order or number of callbacks in the new run.
  virtual std::string state_key() const;

  // Before the optimizer is built, the model on its device (Lightning's setup): a callback that
  // freezes parameters does it here, so the optimizer leaves them out.
  virtual absl::Status OnSetup(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnFitStart(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnFitEnd(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainEpochStart(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainEpochEnd(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainBatchStart(Trainer&, const data::Batch&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainBatchEnd(Trainer&, const data::Batch&, double /*loss*/) {
    return absl::OkStatus();
  }
  virtual absl::Status OnBeforeOptimizerStep(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnValidationStart(Trainer&) { return absl::OkStatus(); }
  // `metrics`: the validation epoch means ("val/loss", "val/acc", ...).
  virtual absl::Status OnValidationEnd(Trainer&, const std::map<std::string, double>& /*metrics*/) {
    return absl::OkStatus();
  }
  virtual absl::Status OnTestEnd(Trainer&, const std::map<std::string, double>& /*metrics*/) {
    return absl::OkStatus();
  }
  // Called when the loop stops on an error or a signal, before it returns.
  virtual void OnException(Trainer&, const absl::Status&) {}

  // State carried by checkpoints (best scores, patience counters, ...).
  virtual void SaveState(torch::serialize::OutputArchive&) const {}
  virtual void LoadState(torch::serialize::InputArchive&) {}
  // When resuming: after every callback's LoadState, before the optimizer's and the scheduler's
  // states load. A callback that added parameter groups to the optimizer adds them again here.
  virtual absl::Status OnLoadCheckpoint(Trainer&) { return absl::OkStatus(); }
  // The weights a checkpoint stores as the model's when they are not the module's own
  // (weight_averaging: the averaged ones, so that evaluating, exporting or predicting from the
  // checkpoint uses them; the training weights then go in the callback's own state, and a resume
  // puts them back in OnLoadCheckpoint). Empty: the module's. The first callback that answers wins.
  virtual std::map<std::string, torch::Tensor> CheckpointModelState() const { return {}; }
};

// A callback that keeps checkpoints (ModelCheckpoint). Commands ask the callbacks for it
// (FindCheckpointKeeper) to resolve ckpt_path=best|last and to test the best checkpoint after
// fit, instead of knowing a component's name or its files.
class CheckpointKeeper {
 public:
  virtual ~CheckpointKeeper() = default;
  virtual const std::string& checkpoint_dir() const = 0;
  // Where the config names no folder: the run's, `dir` (trainer.default_root_dir/checkpoints, as
  // Lightning's default). A folder the config names stays.
  virtual void UseRunCheckpointDir(const std::string& dir) = 0;
  // The best checkpoint kept so far ("" when none): this run's, or the one an earlier run in
  // the same folder recorded.
  virtual std::string best_model_path() const = 0;
};

// The first of `callbacks` that keeps checkpoints, or null.
template <typename C>
CheckpointKeeper* FindCheckpointKeeper(const std::vector<std::shared_ptr<C>>& callbacks) {
  for (const auto& c : callbacks) {
    if (auto* keeper = dynamic_cast<CheckpointKeeper*>(c.get())) return keeper;
  }
  return nullptr;
}

// Logs metrics somewhere (a CSV file, TensorBoard, ...). Built from the `logger` mapping.
class MetricsLogger {
 public:
  static constexpr const char* kKind = "logger";
  virtual ~MetricsLogger() = default;
  // `step` is the optimizer step the values belong to.
  virtual absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  // A fit resumed from a checkpoint at optimizer step `step`, before anything is logged: a logger
  // writing one file per run keeps what the earlier run logged up to that step.
  virtual absl::Status OnResume(int64_t /*step*/) { return absl::OkStatus(); }
  virtual absl::Status Finish() { return absl::OkStatus(); }
  // The job that owns the logger is over (kiln::Job, as it is destroyed): `outcome` is OK, or the
  // error or stop signal (a status carrying exit code 128 + N) that ended it. A tracker ends its
  // run here (after Finish: `kiln train` tests after fitting).
  virtual void OnJobEnd(const absl::Status& /*outcome*/) {}
};

}  // namespace kiln
