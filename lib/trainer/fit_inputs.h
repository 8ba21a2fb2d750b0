// What Trainer::Fit trains: the task and its data, how to make the optimizer and the scheduler,
// where to resume from, and what a checkpoint records about the job.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lib/data/datamodule.h"
#include "lib/trainer/optimization.h"
#include "lib/trainer/task.h"

namespace kiln {

struct FitInputs {
  Task* task = nullptr;
  data::DataModule* data = nullptr;
  std::shared_ptr<OptimizerFactory> optimizer;
  std::shared_ptr<Scheduler> scheduler;  // may be null
  std::string ckpt_path;                 // "", "last", or a file
  uint64_t seed = 0;
  std::string config_yaml;  // the resolved job config, stored in checkpoints
  std::string model_name;   // e.g. "cnn", checked when resuming
  // LoRA on a base the config loads from a file (model.pretrained, model.init_from): checkpoints
  // hold the adapters alone (WriteTrainedModelState) with this digest of the frozen weights, taken
  // once, of the whole model (fsdp shards it later). Empty: whole checkpoints.
  std::string frozen_digest;
};

}  // namespace kiln
