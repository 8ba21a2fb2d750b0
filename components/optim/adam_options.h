// Reads and checks the options Adam and AdamW share (lr, betas, eps, weight_decay, amsgrad) into
// either torch options type.
#pragma once

#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "components/optim/option_checks.h"
#include "lib/config/config.h"
#include "lib/registry/options.h"

namespace kiln {

inline OptionSchema AdamSchema(double weight_decay) {
  return OptionSchema()
      .Required("lr", OptionType::kFloat, "learning rate")
      .Add("betas", OptionType::kList, "[0.9, 0.999]",
           "decay rates of the gradient mean and squared-gradient averages")
      .Float("eps", 1e-8, "added to the denominator for numerical stability")
      .Float("weight_decay", weight_decay, "weight decay factor")
      .Bool("amsgrad", false, "use the maximum of past squared-gradient averages (AMSGrad)")
      .Bool("no_decay_norm_and_bias", false,
            "put parameters with dim <= 1 (biases, norm weights) in a group without weight decay");
}

template <typename TorchOptions>
absl::StatusOr<TorchOptions> ReadAdamOptions(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(double lr, GetPositive(cfg, "lr"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> betas, cfg.Get<std::vector<double>>("betas"));
  if (betas.size() != 2) return BadOption(cfg, "betas", "must be a list of two numbers");
  for (int i = 0; i < 2; ++i) {
    if (!(betas[i] >= 0 && betas[i] < 1)) {
      return BadOption(cfg, "betas." + std::to_string(i), "must be in [0, 1)");
    }
  }
  KILN_ASSIGN_OR_RETURN(double eps, GetNonNegative(cfg, "eps"));
  KILN_ASSIGN_OR_RETURN(double weight_decay, GetNonNegative(cfg, "weight_decay"));
  KILN_ASSIGN_OR_RETURN(bool amsgrad, cfg.Get<bool>("amsgrad"));
  TorchOptions options(lr);
  options.betas(std::make_tuple(betas[0], betas[1]))
      .eps(eps)
      .weight_decay(weight_decay)
      .amsgrad(amsgrad);
  return options;
}

}  // namespace kiln
