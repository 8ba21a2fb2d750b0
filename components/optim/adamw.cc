// `adamw`: torch's AdamW, with weight decay applied to the weights directly (decoupled), stepped
// by ATen's fused kernel (components/optim/fused_adam.h).
#include "components/optim/adam_options.h"
#include "components/optim/fused_adam.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 0.01; }
};

KILN_REGISTER_BOUND(OptimizerFactory, "adamw", "AdamW (decoupled weight decay)",
                    AdamBinding<AdamWOptions>(),
                    [](const AdamWOptions& o, const OptionContext& context)
                        -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
                      return MakeAdamFactory<FusedAdamW, torch::optim::AdamWOptions>(o, context);
                    });

}  // namespace
}  // namespace kiln
