// `adamw`: torch's AdamW, with weight decay applied to the weights directly (decoupled).
#include "components/optim/adam_options.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

using AdamWFactory = TorchOptimizerFactory<torch::optim::AdamW, torch::optim::AdamWOptions>;

struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 0.01; }
};

KILN_REGISTER_BOUND(OptimizerFactory, "adamw", "AdamW (decoupled weight decay)",
                    AdamBinding<AdamWOptions>(),
                    [](const AdamWOptions& o) -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
                      return std::make_shared<AdamWFactory>(
                          ToTorchOptions<torch::optim::AdamWOptions>(o), o.no_decay_norm_and_bias);
                    });

}  // namespace
}  // namespace kiln
