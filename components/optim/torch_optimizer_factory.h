// An OptimizerFactory for one torch optimizer type (SGD, Adam, AdamW): the options of each
// parameter group (components/optim/param_groups.h), applied to the parameters it is given.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "components/optim/param_groups.h"
#include "lib/logging/logger.h"
#include "lib/trainer/optimization.h"

namespace kiln {

template <typename TorchOptimizer, typename TorchOptions>
class TorchOptimizerFactory : public OptimizerFactory {
 public:
  // Builds the optimizer from its groups and default options; null: TorchOptimizer's constructor
  // (an optimizer with options of its own beyond TorchOptions passes a function that adds them).
  using Make = std::function<std::unique_ptr<torch::optim::Optimizer>(
      std::vector<torch::optim::OptimizerParamGroup>, const TorchOptions&)>;
  // `options[i]` are the options of plan.specs()[i]: the rest's first.
  TorchOptimizerFactory(std::vector<TorchOptions> options, ParamGroupPlan plan, Make make = nullptr)
      : options_(std::move(options)), plan_(std::move(plan)), make_(std::move(make)) {}

  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> Create(
      const NamedParameters& params, const std::vector<std::string>& model_names = {}) override {
    KILN_ASSIGN_OR_RETURN(std::vector<ParamGroupPlan::Slot> slots,
                          plan_.Assign(params, model_names));
    if (slots.empty()) return absl::InvalidArgumentError("the optimizer got no parameters");
    std::vector<torch::optim::OptimizerParamGroup> groups;
    std::string described;
    for (const auto& slot : slots) {
      auto options = std::make_unique<TorchOptions>(options_[slot.spec]);
      options->lr(options->lr() * slot.lr_scale);
      if (slot.no_decay) options->weight_decay(0.0);
      if (plan_.by_name()) {
        absl::StrAppend(
            &described, "\n  ",
            plan_.Describe(groups.size(), slot, options->lr(), options->weight_decay()));
      }
      groups.emplace_back(slot.params, std::move(options));
    }
    if (plan_.by_name()) {
      Logger::Instance().Info(
          absl::StrCat("optimizer: ", groups.size(), " parameter groups", described));
    }
    try {
      if (make_ != nullptr) return make_(std::move(groups), options_.front());
      return std::unique_ptr<torch::optim::Optimizer>(
          std::make_unique<TorchOptimizer>(std::move(groups), options_.front()));
    } catch (const c10::Error& e) {
      // Options were validated at config time; what is left is about the tensors (non-leaf ones).
      return absl::InvalidArgumentError(
          absl::StrCat("cannot build the optimizer: ", e.what_without_backtrace()));
    }
  }

 private:
  std::vector<TorchOptions> options_;
  ParamGroupPlan plan_;
  Make make_;
};

// The factory for an optimizer whose options struct S (deriving from ParamGroupsOptions) is
// declared by `binding`; `convert` makes torch's options from S (or refuses a combination of
// values, naming the key of the group, e.g. "optimizer.param_groups.1").
template <typename TorchOptimizer, typename TorchOptions, typename S, typename Convert>
absl::StatusOr<std::shared_ptr<OptimizerFactory>> MakeTorchOptimizerFactory(
    const S& o, const OptionContext& context, const OptionBinding<S>& binding, Convert convert,
    typename TorchOptimizerFactory<TorchOptimizer, TorchOptions>::Make make = nullptr) {
  KILN_ASSIGN_OR_RETURN(auto groups, ReadParamGroups(o, context, binding));
  std::vector<TorchOptions> options;
  for (size_t i = 0; i < groups.first.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(TorchOptions converted,
                          convert(groups.first[i], groups.second.specs()[i].key));
    options.push_back(std::move(converted));
  }
  return std::make_shared<TorchOptimizerFactory<TorchOptimizer, TorchOptions>>(
      std::move(options), std::move(groups.second), std::move(make));
}

}  // namespace kiln
