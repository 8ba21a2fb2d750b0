// The options Adam and AdamW share (lr, betas, eps, weight_decay, amsgrad,
// no_decay_norm_and_bias), declared once for both; only weight_decay's default differs.
#pragma once

#include <tuple>
#include <utility>

#include "lib/registry/options.h"

namespace kiln {

struct AdamOptions {
  double lr = 0;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool no_decay_norm_and_bias = false;
};

// S is AdamOptions or derives from it (to change a default).
template <typename S>
OptionBinding<S> AdamBinding() {
  static_assert(std::is_base_of_v<AdamOptions, S>);
  using O = AdamOptions;
  return OptionBinding<S>()
      .Required("lr", static_cast<double S::*>(&O::lr), "learning rate", GreaterThan(0))
      .Field("betas", static_cast<std::pair<double, double> S::*>(&O::betas),
             "decay rates of the gradient mean and squared-gradient averages",
             Each(InHalfOpenRange(0, 1)))
      .Field("eps", static_cast<double S::*>(&O::eps),
             "added to the denominator for numerical stability", AtLeast(0))
      .Field("weight_decay", static_cast<double S::*>(&O::weight_decay), "weight decay factor",
             AtLeast(0))
      .Field("amsgrad", static_cast<bool S::*>(&O::amsgrad),
             "use the maximum of past squared-gradient averages (AMSGrad)")
      .Field("no_decay_norm_and_bias", static_cast<bool S::*>(&O::no_decay_norm_and_bias),
             "put parameters with dim <= 1 (biases, norm weights) in a group without weight decay");
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

}  // namespace kiln
