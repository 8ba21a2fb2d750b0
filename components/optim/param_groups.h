// Parameter groups by name, for every optimizer: `param_groups` (globs of parameter names with
// their own lr, weight_decay, momentum, betas ...), layer-wise lr decay over a stack of numbered
// blocks (`lr_decay`, BEiT's convention) and `no_decay_norm_and_bias`. Parameters that no group
// names train with the optimizer's own options, as "the rest".
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/registry/options.h"
#include "lib/trainer/optimization.h"

namespace kiln {

// The options every optimizer declares for its groups; its options struct derives from this one.
struct ParamGroupsOptions {
  config::NodePtr param_groups;  // a list of {params: [globs], OPTION: value, ...}; null: none
  std::optional<double> lr_decay;
  std::optional<std::string> lr_decay_blocks;
  bool no_decay_norm_and_bias = false;
};

// Declares the options of ParamGroupsOptions on S, after the options `binding` already has.
template <typename S>
OptionBinding<S> AddParamGroupsOptions(OptionBinding<S> binding) {
  static_assert(std::is_base_of_v<ParamGroupsOptions, S>);
  using O = ParamGroupsOptions;
  return binding
      .Field("no_decay_norm_and_bias", static_cast<bool S::*>(&O::no_decay_norm_and_bias),
             "put parameters with dim <= 1 (biases, norm weights) in a group without weight decay")
      .Node("param_groups", static_cast<config::NodePtr S::*>(&O::param_groups), OptionType::kList,
            "groups with their own options: [{params: [globs], lr: ..., weight_decay: ...}]; the "
            "parameters no group names keep the optimizer's options")
      .Field("lr_decay", static_cast<std::optional<double> S::*>(&O::lr_decay),
             "layer-wise lr decay: block N of L trains at lr x lr_decay^(L-N), embeddings at "
             "lr x lr_decay^(L+1), the head at lr",
             OptionCheck{"in (0, 1]",
                         [](const config::Node& n) {
                           double v = n.kind() == config::NodeKind::kInt     ? n.as_int()
                                      : n.kind() == config::NodeKind::kFloat ? n.as_float()
                                                                             : -1;
                           return v > 0 && v <= 1;
                         }})
      .Field("lr_decay_blocks", static_cast<std::optional<std::string> S::*>(&O::lr_decay_blocks),
             "the name prefix of the stacked blocks that lr_decay counts (transformer.h.); null: "
             "the model's one stack of numbered blocks");
}

// Which parameters go in which group.
class ParamGroupPlan {
 public:
  struct Spec {
    std::string key;                 // "optimizer" (the rest) or "optimizer.param_groups.0"
    std::vector<std::string> globs;  // empty for the rest
    bool no_decay_norm_and_bias = false;
  };
  // A parameter group as it goes into the optimizer.
  struct Slot {
    size_t spec = 0;        // index into specs(): 0 the rest, i + 1 param_groups.i
    int64_t layer = -1;     // with lr_decay: 0 embeddings, N + 1 block N, L + 1 the head
    double lr_scale = 1.0;  // lr_decay^(L + 1 - layer)
    bool no_decay = false;  // weight decay 0
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
  };

  ParamGroupPlan(std::vector<Spec> specs, std::optional<double> lr_decay,
                 std::optional<std::string> lr_decay_blocks, std::string key);

  // The groups of `params`, the rest's first, then param_groups in their order; each split by
  // layer (the head's first) and by weight decay. Globs must each match one of `model_names`
  // (every parameter of the model; empty: those of `params`), and a name be in one group only.
  absl::StatusOr<std::vector<Slot>> Assign(const NamedParameters& params,
                                           const std::vector<std::string>& model_names) const;
  // Whether groups go by name (param_groups or lr_decay): then the optimizer logs them.
  bool by_name() const { return specs_.size() > 1 || lr_decay_.has_value(); }
  const std::vector<Spec>& specs() const { return specs_; }
  // "pg2: 4 tensors, param_groups.0, layer 3 (block 2)" for the log.
  std::string Describe(size_t index, const Slot& slot, double lr, double weight_decay) const;

 private:
  std::vector<Spec> specs_;
  std::optional<double> lr_decay_;
  std::optional<std::string> lr_decay_blocks_;
  std::string key_;  // the optimizer's key ("optimizer")
};

namespace internal {
// The options node of param_groups.`index`: the optimizer's validated options with the group's
// own values over them. Its `params` go to `globs`.
absl::StatusOr<config::NodePtr> ParamGroupNode(const ParamGroupsOptions& o,
                                               const OptionContext& context, size_t index,
                                               std::vector<std::string>* globs);
}  // namespace internal

// The options of every group, the optimizer's own first (the rest), then each of `param_groups`
// validated by the optimizer's own declaration, and the plan that places the parameters.
template <typename S>
absl::StatusOr<std::pair<std::vector<S>, ParamGroupPlan>> ReadParamGroups(
    const S& o, const OptionContext& context, const OptionBinding<S>& binding) {
  static_assert(std::is_base_of_v<ParamGroupsOptions, S>);
  std::vector<S> options{o};
  std::vector<ParamGroupPlan::Spec> specs{{context.FullKey(""), {}, o.no_decay_norm_and_bias}};
  size_t count =
      o.param_groups != nullptr && o.param_groups->is_list() ? o.param_groups->size() : 0;
  for (size_t i = 0; i < count; ++i) {
    std::vector<std::string> globs;
    KILN_ASSIGN_OR_RETURN(config::NodePtr node, internal::ParamGroupNode(o, context, i, &globs));
    std::string key = context.FullKey(absl::StrCat("param_groups.", i));
    KILN_ASSIGN_OR_RETURN(config::NodePtr applied,
                          binding.schema().Apply(*node, key, context.component()));
    options.push_back(binding.Fill(config::Config(applied, key)));
    specs.push_back({key, std::move(globs), options.back().no_decay_norm_and_bias});
  }
  std::string key = context.FullKey("");
  return std::make_pair(std::move(options), ParamGroupPlan(std::move(specs), o.lr_decay,
                                                           o.lr_decay_blocks, std::move(key)));
}

}  // namespace kiln
