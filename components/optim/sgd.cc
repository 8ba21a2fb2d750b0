// `sgd`: torch's stochastic gradient descent, with momentum by default.
#include "absl/strings/str_cat.h"
#include "components/optim/param_groups.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

struct SgdOptions : ParamGroupsOptions {
  double lr = 0;
  double momentum = 0.9;
  bool nesterov = false;
  double dampening = 0.0;
  double weight_decay = 0.0;
};

OptionBinding<SgdOptions> SgdBinding() {
  return AddParamGroupsOptions(
      OptionBinding<SgdOptions>()
          .Required("lr", &SgdOptions::lr, "learning rate", GreaterThan(0))
          .Field("momentum", &SgdOptions::momentum, "momentum factor (0 for plain SGD)", AtLeast(0))
          .Field("nesterov", &SgdOptions::nesterov,
                 "Nesterov momentum (needs momentum > 0, dampening 0)")
          .Field("dampening", &SgdOptions::dampening, "dampening for momentum")
          .Field("weight_decay", &SgdOptions::weight_decay, "L2 penalty added to the gradient",
                 AtLeast(0)));
}

KILN_REGISTER_BOUND(
    OptimizerFactory, "sgd", "Stochastic gradient descent with momentum", SgdBinding(),
    [](const SgdOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
      return MakeTorchOptimizerFactory<torch::optim::SGD, torch::optim::SGDOptions>(
          o, context, SgdBinding(),
          [&](const SgdOptions& g,
              const std::string& key) -> absl::StatusOr<torch::optim::SGDOptions> {
            if (g.nesterov && !(g.momentum > 0 && g.dampening == 0)) {
              std::string what =
                  absl::StrCat("false unless momentum > 0 and dampening 0 (momentum ", g.momentum,
                               ", dampening ", g.dampening, ")");
              if (key == context.FullKey("")) return context.Refuse("nesterov", what);
              return OptionValueError(absl::StrCat(key, ".nesterov"), context.component(), what,
                                      *config::Node::Bool(true));
            }
            torch::optim::SGDOptions options(g.lr);
            options.momentum(g.momentum)
                .dampening(g.dampening)
                .weight_decay(g.weight_decay)
                .nesterov(g.nesterov);
            return options;
          });
    });

}  // namespace
}  // namespace kiln
