// `adam`: torch's Adam, with L2 weight decay added to the gradient, stepped by ATen's fused kernel
// (components/optim/fused_adam.h).
#include "components/optim/adam_options.h"
#include "components/optim/fused_adam.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

KILN_REGISTER_BOUND(OptimizerFactory, "adam", "Adam (weight decay as an L2 term in the gradient)",
                    AdamBinding<AdamOptions>(),
                    [](const AdamOptions& o, const OptionContext& context)
                        -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
                      return MakeAdamFactory<FusedAdam, torch::optim::AdamOptions>(o, context);
                    });

}  // namespace
}  // namespace kiln
