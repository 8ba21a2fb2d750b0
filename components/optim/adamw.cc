// `adamw`: torch's AdamW, with weight decay applied to the weights directly (decoupled).
#include "components/optim/adam_options.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

using AdamWFactory = TorchOptimizerFactory<torch::optim::AdamW, torch::optim::AdamWOptions>;

KILN_REGISTER(OptimizerFactory, "adamw", "AdamW (decoupled weight decay)",
              AdamSchema(/*weight_decay=*/0.01),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
                KILN_ASSIGN_OR_RETURN(auto options,
                                      ReadAdamOptions<torch::optim::AdamWOptions>(cfg));
                KILN_ASSIGN_OR_RETURN(bool no_decay, cfg.Get<bool>("no_decay_norm_and_bias"));
                return std::make_shared<AdamWFactory>(options, no_decay);
              });

}  // namespace
}  // namespace kiln
