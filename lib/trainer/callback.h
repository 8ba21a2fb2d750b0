// Callbacks hook into the training loop at Lightning's points; they run in list order, before
// the task's own hooks, with checkpointing last. Built by name from the `callbacks` config
// mapping through Registry<Callback>.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

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

  virtual absl::Status OnFitStart(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnFitEnd(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainEpochStart(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainEpochEnd(Trainer&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainBatchStart(Trainer&, const data::Batch&) { return absl::OkStatus(); }
  virtual absl::Status OnTrainBatchEnd(Trainer&, const data::Batch&, double /*loss*/) { return absl::OkStatus(); }
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
};

// Logs metrics somewhere (a CSV file, TensorBoard, ...). Built from the `logger` mapping.
class MetricsLogger {
 public:
  static constexpr const char* kKind = "logger";
  virtual ~MetricsLogger() = default;
  // `step` is the optimizer step the values belong to.
  virtual absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  virtual absl::Status Finish() { return absl::OkStatus(); }
};

}  // namespace kiln
