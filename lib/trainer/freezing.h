// Freezing parameters by glob (`model.freeze`, the backbone_finetuning callback): which
// parameters a glob list names, turning their gradients off and on, and keeping the BatchNorm
// layers among them in eval mode so their running statistics stay as loaded.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/trainer/callback.h"

namespace kiln {

// fnmatch-style glob over parameter names ("fc2.*", "conv?.weight", "*bn*"); '*' crosses dots.
bool GlobMatches(const std::string& glob, const std::string& name);

// The parameters of `module` matching any of `globs`, in the module's order. A glob that matches
// no parameter is an error naming `option` ("model.freeze"): a typo would silently train what
// was meant to stay fixed.
absl::StatusOr<std::vector<std::string>> ParametersMatching(torch::nn::Module& module,
                                                            const std::vector<std::string>& globs,
                                                            const std::string& option);
// The same over a list of parameter names (`all`, in the model's order).
absl::StatusOr<std::vector<std::string>> NamesMatching(const std::vector<std::string>& all,
                                                       const std::vector<std::string>& globs,
                                                       const std::string& option);
// Sets requires_grad on the named parameters.
void SetTrainable(torch::nn::Module& module, const std::vector<std::string>& names, bool trainable);
// Whether any parameter of `module` would still train.
bool AnyTrainable(torch::nn::Module& module);
// The BatchNorm modules (any dimension) all of whose parameters are among `names`.
std::vector<std::shared_ptr<torch::nn::Module>> BatchNormsWithin(
    torch::nn::Module& module, const std::vector<std::string>& names);

// Puts the frozen BatchNorm layers in eval mode before every training batch (the loops switch
// the whole model to train mode at each epoch and after validation). `model.freeze` adds it.
class FrozenBatchNormsInEval : public Callback {
 public:
  explicit FrozenBatchNormsInEval(std::vector<std::shared_ptr<torch::nn::Module>> norms)
      : norms_(std::move(norms)) {}
  absl::Status OnTrainBatchStart(Trainer&, const data::Batch&) override;

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> norms_;
};

}  // namespace kiln
