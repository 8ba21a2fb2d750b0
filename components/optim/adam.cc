// `adam`: torch's Adam, with L2 weight decay added to the gradient.
#include "components/optim/adam_options.h"
#include "components/optim/torch_optimizer_factory.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

using AdamFactory = TorchOptimizerFactory<torch::optim::Adam, torch::optim::AdamOptions>;

KILN_REGISTER(OptimizerFactory, "adam", "Adam (weight decay as an L2 term in the gradient)",
              AdamSchema(/*weight_decay=*/0.0),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
                KILN_ASSIGN_OR_RETURN(auto options,
                                      ReadAdamOptions<torch::optim::AdamOptions>(cfg));
                KILN_ASSIGN_OR_RETURN(bool no_decay, cfg.Get<bool>("no_decay_norm_and_bias"));
                return std::make_shared<AdamFactory>(options, no_decay);
              });

}  // namespace
}  // namespace kiln
