// How a model starts (`model.init_from`: weights from a safetensors file or a kiln checkpoint,
// with `init_ignore`, `init_map` and `init_strict`; `model.freeze`). These keys sit under `model:`
// but are not the model's options: the commands and kiln::Predictor build the model from the
// config without them.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/data/datamodule.h"
#include "lib/trainer/callback.h"
#include "lib/trainer/task.h"
#include "lib/trainer/trainer_options.h"

namespace kiln {

struct ModelStartOptions {
  std::optional<std::string> init_from;
  std::vector<std::string> init_ignore;
  config::NodePtr init_map;  // {file prefix: model prefix}
  bool init_strict = true;
  std::vector<std::string> freeze;
  // New DoRA adapters or trainable tokens (model.lora without `from`): they start from the base's
  // weights (the row norms; the rows), so they are set again once init_from has loaded those.
  bool start_adapters_from_base = false;
};

struct ModelStart {
  ModelStartOptions options;
  config::Config build_cfg;  // the job config without them
};

// The model-start options of a job config, checked, and the job config without them.
absl::StatusOr<ModelStart> ReadModelStart(const config::Config& cfg);

// Loads the initial weights and freezes what `model.freeze` names; a fit gets the callback that
// keeps frozen BatchNorm layers in eval mode.
absl::Status ApplyModelStart(const ModelStartOptions& o, torch::nn::Module& module, bool fit,
                             std::vector<std::shared_ptr<Callback>>* callbacks);

// The parts of a job that hold the model: the trainer options, the task with its model built (from
// the config without the model-start keys) and the data module, connected to each other. The
// commands' kiln::Job and kiln::Predictor both start here.
struct ModelParts {
  TrainerOptions options;
  std::shared_ptr<Task> task;
  std::shared_ptr<data::DataModule> data;
  std::string model_name;  // model._target_
  ModelStartOptions start;
};
absl::StatusOr<ModelParts> BuildModelParts(const config::Config& cfg);

}  // namespace kiln
