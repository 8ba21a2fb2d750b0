// An OptimizerFactory for one torch optimizer type (SGD, Adam, AdamW): fixed options, applied to
// the parameters it is given, optionally split so biases and norm parameters skip weight decay.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/trainer/optimization.h"

namespace kiln {

template <typename TorchOptimizer, typename TorchOptions>
class TorchOptimizerFactory : public OptimizerFactory {
 public:
  TorchOptimizerFactory(TorchOptions options, bool no_decay_norm_and_bias)
      : options_(std::move(options)), no_decay_norm_and_bias_(no_decay_norm_and_bias) {}

  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> Create(
      const NamedParameters& params) override {
    std::vector<torch::Tensor> decay;
    std::vector<torch::Tensor> no_decay;
    // Tied weights appear under several names; torch would step them once per appearance.
    std::unordered_set<const void*> seen;
    for (const auto& [name, tensor] : params) {
      if (!seen.insert(tensor.unsafeGetTensorImpl()).second) continue;
      (no_decay_norm_and_bias_ && tensor.dim() <= 1 ? no_decay : decay).push_back(tensor);
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    if (!decay.empty()) groups.emplace_back(decay, std::make_unique<TorchOptions>(options_));
    if (!no_decay.empty()) {
      auto options = std::make_unique<TorchOptions>(options_);
      options->weight_decay(0.0);
      groups.emplace_back(no_decay, std::move(options));
    }
    if (groups.empty()) return absl::InvalidArgumentError("the optimizer got no parameters");
    try {
      return std::unique_ptr<torch::optim::Optimizer>(
          std::make_unique<TorchOptimizer>(std::move(groups), options_));
    } catch (const c10::Error& e) {
      // Options were validated at config time; what is left is about the tensors (non-leaf ones).
      return absl::InvalidArgumentError(
          absl::StrCat("cannot build the optimizer: ", e.what_without_backtrace()));
    }
  }

 private:
  TorchOptions options_;
  bool no_decay_norm_and_bias_;
};

}  // namespace kiln
