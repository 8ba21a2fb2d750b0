#include "lib/distributed/sharding_units.h"

#include <unordered_map>

namespace kiln::distributed {
namespace {
std::unordered_map<const torch::nn::Module*, UnitHooks*>& Installed() {
  static auto* installed = new std::unordered_map<const torch::nn::Module*, UnitHooks*>();
  return *installed;
}
}  // namespace

ShardingUnits::~ShardingUnits() = default;
UnitHooks::~UnitHooks() = default;

void SetUnitHooks(const torch::nn::Module* unit, UnitHooks* hooks) {
  if (hooks == nullptr) {
    Installed().erase(unit);
  } else {
    Installed()[unit] = hooks;
  }
}

torch::Tensor RunUnit(const torch::nn::Module& unit,
                      const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                      const torch::Tensor& x) {
  auto it = Installed().find(&unit);
  if (it == Installed().end()) return fn(x);
  UnitHooks* hooks = it->second;
  torch::Tensor out = fn(hooks->BeforeForward(unit, x));
  hooks->AfterForward(unit, out);
  return out;
}

}  // namespace kiln::distributed
