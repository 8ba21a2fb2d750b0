// Optimizers and learning-rate schedulers: the interfaces the trainer drives; implementations
// register in components/optim. Built by name from config (`optimizer: {_target_: adamw,
// lr: 1e-3}`) through Registry<OptimizerFactory> and Registry<Scheduler>.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

// Builds a torch optimizer over a model's parameters, in parameter groups: with
// `no_decay_norm_and_bias`, parameters of dimension <= 1 (biases, norm scales and shifts) go to a
// group without weight decay; `param_groups` and `lr_decay` (components/optim/param_groups.h) make
// groups by name.
class OptimizerFactory {
 public:
  static constexpr const char* kKind = "optimizer";
  virtual ~OptimizerFactory() = default;
  // `params`: the parameters to train. `model_names`: the names of every parameter of the model,
  // frozen ones too, in the model's order (empty: the names in `params`): what group globs must
  // match and layer-wise decay counts layers in, so a group is the same whichever subset of the
  // model is trained (backbone_finetuning adds the rest later).
  virtual absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> Create(
      const NamedParameters& params, const std::vector<std::string>& model_names = {}) = 0;
};

// Sets the learning rate of every parameter group, once per optimizer step or once per epoch.
class Scheduler {
 public:
  static constexpr const char* kKind = "scheduler";
  enum class Interval { kStep, kEpoch };
  virtual ~Scheduler() = default;

  // Called once before training: the optimizer (its groups' current lr are the base rates) and
  // the planned number of optimizer steps (total and per epoch), for schedules that need them.
  virtual absl::Status Attach(torch::optim::Optimizer* optimizer, int64_t total_steps,
                              int64_t steps_per_epoch) = 0;
  // Advances one step or epoch (see interval()); `metric` is the monitored value for plateau
  // schedules (NaN when there is none).
  virtual void Step(double metric) = 0;
  virtual Interval interval() const = 0;
  // A parameter group was added to the optimizer after Attach (backbone_finetuning): its lr now
  // is its base rate. By default the schedule leaves the group alone.
  virtual void OnParamGroupAdded(double /*base_lr*/) {}
  // The name of the metric a plateau schedule watches ("" for none).
  virtual std::string monitor() const { return ""; }

  // Checkpoint state: enough to continue exactly.
  virtual void Save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void Load(torch::serialize::InputArchive& archive) = 0;
};

}  // namespace kiln
