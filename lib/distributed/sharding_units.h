// The seam between models and fully sharded data parallelism (fully_sharded.h). A model that can
// be sharded unit by unit (a transformer's blocks) says which submodules are its units, and runs
// each one through RunUnit, which lets the sharding gather the unit's parameters before its forward
// and hand them back after; with nothing installed, RunUnit is the plain call. The hooks are per
// unit module and per process (one training thread).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace kiln::distributed {

// What a shardable model implements beside torch::nn::Module: its units, in forward order.
class ShardingUnits {
 public:
  virtual ~ShardingUnits();
  virtual std::vector<std::shared_ptr<torch::nn::Module>> sharding_units() const = 0;
};

class UnitHooks {
 public:
  virtual ~UnitHooks();
  // Before the unit's forward: its parameters hold their full values afterwards. Returns the
  // input the unit computes from (the same values; the hooks may mark it to learn when the
  // backward is through the unit).
  virtual torch::Tensor BeforeForward(const torch::nn::Module& unit,
                                      const torch::Tensor& input) = 0;
  // After it, with its output: what the backward will need of the unit is arranged here.
  virtual void AfterForward(const torch::nn::Module& unit, const torch::Tensor& output) = 0;
};

// Installs (or, with null, removes) `hooks` for `unit`.
void SetUnitHooks(const torch::nn::Module* unit, UnitHooks* hooks);

// fn(x), with the unit's hooks around it when some are installed.
torch::Tensor RunUnit(const torch::nn::Module& unit,
                      const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                      const torch::Tensor& x);

}  // namespace kiln::distributed
