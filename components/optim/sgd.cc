// `sgd`: torch's stochastic gradient descent, with momentum by default.
#include "absl/strings/str_cat.h"
#include "components/optim/option_checks.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

using SgdFactory = TorchOptimizerFactory<torch::optim::SGD, torch::optim::SGDOptions>;

absl::StatusOr<std::shared_ptr<OptimizerFactory>> MakeSgd(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(double lr, GetPositive(cfg, "lr"));
  KILN_ASSIGN_OR_RETURN(double momentum, GetNonNegative(cfg, "momentum"));
  KILN_ASSIGN_OR_RETURN(bool nesterov, cfg.Get<bool>("nesterov"));
  KILN_ASSIGN_OR_RETURN(double dampening, cfg.Get<double>("dampening"));
  KILN_ASSIGN_OR_RETURN(double weight_decay, GetNonNegative(cfg, "weight_decay"));
  KILN_ASSIGN_OR_RETURN(bool no_decay, cfg.Get<bool>("no_decay_norm_and_bias"));
  if (nesterov && !(momentum > 0 && dampening == 0)) {
    std::string where = cfg.WhereSet("nesterov");
    return absl::InvalidArgumentError(absl::StrCat(
        "option '", cfg.FullKey("nesterov"), "' needs momentum > 0 and dampening 0, got momentum ",
        momentum, " and dampening ", dampening, where.empty() ? "" : " (set at " + where + ")"));
  }
  torch::optim::SGDOptions options(lr);
  options.momentum(momentum).dampening(dampening).weight_decay(weight_decay).nesterov(nesterov);
  return std::make_shared<SgdFactory>(options, no_decay);
}

KILN_REGISTER(OptimizerFactory, "sgd", "Stochastic gradient descent with momentum",
              OptionSchema()
                  .Required("lr", OptionType::kFloat, "learning rate")
                  .Float("momentum", 0.9, "momentum factor (0 for plain SGD)")
                  .Bool("nesterov", false, "Nesterov momentum (needs momentum > 0, dampening 0)")
                  .Float("dampening", 0.0, "dampening for momentum")
                  .Float("weight_decay", 0.0, "L2 penalty added to the gradient")
                  .Bool("no_decay_norm_and_bias", false,
                        "put parameters with dim <= 1 (biases, norm weights) in a group without "
                        "weight decay"),
              MakeSgd);

}  // namespace
}  // namespace kiln
