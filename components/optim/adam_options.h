// The options Adam and AdamW share (lr, betas, eps, weight_decay, amsgrad, and the parameter
// groups'), declared once for both; only weight_decay's default differs.
#pragma once

#include <tuple>
#include <utility>

#include "components/optim/param_groups.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/options.h"

namespace kiln {

struct AdamOptions : ParamGroupsOptions {
  double lr = 0;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
};

// S is AdamOptions or derives from it (to change a default).
template <typename S>
OptionBinding<S> AdamBinding() {
  static_assert(std::is_base_of_v<AdamOptions, S>);
  using O = AdamOptions;
  return AddParamGroupsOptions(
      OptionBinding<S>()
          .Required("lr", static_cast<double S::*>(&O::lr), "learning rate", GreaterThan(0))
          .Field("betas", static_cast<std::pair<double, double> S::*>(&O::betas),
                 "decay rates of the gradient mean and squared-gradient averages",
                 Each(InHalfOpenRange(0, 1)))
          .Field("eps", static_cast<double S::*>(&O::eps),
                 "added to the denominator for numerical stability", AtLeast(0))
          .Field("weight_decay", static_cast<double S::*>(&O::weight_decay), "weight decay factor",
                 AtLeast(0))
          .Field("amsgrad", static_cast<bool S::*>(&O::amsgrad),
                 "use the maximum of past squared-gradient averages (AMSGrad)"));
}

// torch::optim::AdamOptions or AdamWOptions.
template <typename TorchOptions>
TorchOptions ToTorchOptions(const AdamOptions& o) {
  TorchOptions options(o.lr);
  options.betas(std::make_tuple(o.betas.first, o.betas.second))
      .eps(o.eps)
      .weight_decay(o.weight_decay)
      .amsgrad(o.amsgrad);
  return options;
}

// The factory of torch's Adam or AdamW with these options (and their groups').
// `make`: as MakeTorchOptimizerFactory's (null: TorchOptimizer's constructor); `binding`: S's
// declaration when S adds options to Adam's.
template <typename TorchOptimizer, typename TorchOptions, typename S>
absl::StatusOr<std::shared_ptr<OptimizerFactory>> MakeAdamFactory(
    const S& o, const OptionContext& context,
    typename TorchOptimizerFactory<TorchOptimizer, TorchOptions>::Make make = nullptr,
    const OptionBinding<S>& binding = AdamBinding<S>()) {
  return MakeTorchOptimizerFactory<TorchOptimizer, TorchOptions>(
      o, context, binding,
      [](const S& group, const std::string&) -> absl::StatusOr<TorchOptions> {
        return ToTorchOptions<TorchOptions>(group);
      },
      std::move(make));
}

}  // namespace kiln
