// `sgd`: torch's stochastic gradient descent, with momentum by default.
#include "absl/strings/str_cat.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

using SgdFactory = TorchOptimizerFactory<torch::optim::SGD, torch::optim::SGDOptions>;

struct SgdOptions {
  double lr = 0;
  double momentum = 0.9;
  bool nesterov = false;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool no_decay_norm_and_bias = false;
};

KILN_REGISTER_BOUND(
    OptimizerFactory, "sgd", "Stochastic gradient descent with momentum",
    OptionBinding<SgdOptions>()
        .Required("lr", &SgdOptions::lr, "learning rate", GreaterThan(0))
        .Field("momentum", &SgdOptions::momentum, "momentum factor (0 for plain SGD)", AtLeast(0))
        .Field("nesterov", &SgdOptions::nesterov,
               "Nesterov momentum (needs momentum > 0, dampening 0)")
        .Field("dampening", &SgdOptions::dampening, "dampening for momentum")
        .Field("weight_decay", &SgdOptions::weight_decay, "L2 penalty added to the gradient",
               AtLeast(0))
        .Field(
            "no_decay_norm_and_bias", &SgdOptions::no_decay_norm_and_bias,
            "put parameters with dim <= 1 (biases, norm weights) in a group without weight decay"),
    [](const SgdOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
      if (o.nesterov && !(o.momentum > 0 && o.dampening == 0)) {
        return context.Refuse("nesterov",
                              absl::StrCat("false unless momentum > 0 and dampening 0 (momentum ",
                                           o.momentum, ", dampening ", o.dampening, ")"));
      }
      torch::optim::SGDOptions options(o.lr);
      options.momentum(o.momentum)
          .dampening(o.dampening)
          .weight_decay(o.weight_decay)
          .nesterov(o.nesterov);
      return std::make_shared<SgdFactory>(options, o.no_decay_norm_and_bias);
    });

}  // namespace
}  // namespace kiln
