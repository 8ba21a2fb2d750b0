// `adam`: torch's Adam, with L2 weight decay added to the gradient.
#include "components/optim/adam_options.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

using AdamFactory = TorchOptimizerFactory<torch::optim::Adam, torch::optim::AdamOptions>;

KILN_REGISTER_BOUND(OptimizerFactory, "adam", "Adam (weight decay as an L2 term in the gradient)",
                    AdamBinding<AdamOptions>(),
                    [](const AdamOptions& o) -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
                      return std::make_shared<AdamFactory>(
                          ToTorchOptions<torch::optim::AdamOptions>(o), o.no_decay_norm_and_bias);
                    });

}  // namespace
}  // namespace kiln
