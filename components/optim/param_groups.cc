// Placing parameters in groups by name: param_groups' globs, layer-wise lr decay, no decay for
// biases and norm parameters.
#include "components/optim/param_groups.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_set>

#include "absl/strings/str_join.h"
#include "lib/trainer/freezing.h"

namespace kiln {
namespace {

std::string KeyOf(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
}

// The first numbered part of a parameter name: "transformer.h.3.mlp.0.weight" is block 3 after
// "transformer.h.", "encoder.layers.encoder_layer_3.ln_1.weight" block 3 after
// "encoder.layers.encoder_layer_". A part is numbered when it is a number (a ModuleList or
// Sequential index) or ends in _NUMBER; the last part (weight, bias) never counts.
std::optional<std::pair<std::string, int64_t>> FirstNumberedPart(const std::string& name) {
  size_t start = 0;
  for (size_t end = name.find('.'); end != std::string::npos; end = name.find('.', start)) {
    std::string part = name.substr(start, end - start);
    size_t last = part.find_last_not_of("0123456789");
    if (!part.empty() && last == std::string::npos && part.size() < 10) {
      return std::make_pair(name.substr(0, start), std::stoll(part));
    }
    if (last != std::string::npos && last + 1 < part.size() && part[last] == '_' &&
        part.size() - last - 1 < 10) {
      return std::make_pair(name.substr(0, start + last + 1), std::stoll(part.substr(last + 1)));
    }
    start = end + 1;
  }
  return std::nullopt;
}

// The block number of `name` under `prefix` ("transformer.h." + "3.attn..." -> 3), if any.
std::optional<int64_t> BlockUnder(const std::string& prefix, const std::string& name) {
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t digits = name.find_first_not_of("0123456789", prefix.size());
  if (digits == prefix.size() || digits == std::string::npos || name[digits] != '.' ||
      digits - prefix.size() >= 10) {
    return std::nullopt;
  }
  return std::stoll(name.substr(prefix.size(), digits - prefix.size()));
}

// BEiT's layer ids (get_num_layer_for_vit): 0 for what comes before the first block in the
// model's order (patch and position embeddings, class token), N + 1 for block N, L + 1 for the
// rest (final norm, head), L the number of blocks.
struct LayerIds {
  std::map<std::string, int64_t> of;
  int64_t num_layers = 0;
};

absl::StatusOr<LayerIds> BlockLayers(const std::vector<std::string>& names,
                                     const std::optional<std::string>& blocks_option,
                                     const std::string& key) {
  std::string prefix;
  if (blocks_option.has_value()) {
    prefix = *blocks_option;
    if (std::none_of(names.begin(), names.end(),
                     [&](const std::string& n) { return BlockUnder(prefix, n).has_value(); })) {
      return absl::InvalidArgumentError(
          absl::StrCat(KeyOf(key, "lr_decay_blocks"), ": no parameter name is '", prefix,
                       "' followed by a block number and a dot (e.g. ", prefix, "0.weight)"));
    }
  } else {
    std::vector<std::string> stacks;
    for (const auto& name : names) {
      auto numbered = FirstNumberedPart(name);
      if (numbered && std::find(stacks.begin(), stacks.end(), numbered->first) == stacks.end()) {
        stacks.push_back(numbered->first);
      }
    }
    if (stacks.empty()) {
      size_t shown = std::min<size_t>(names.size(), 4);
      return absl::InvalidArgumentError(absl::StrCat(
          KeyOf(key, "lr_decay"),
          ": the model has no stacked blocks to decay over (parameter names PREFIX.N.* such as "
          "blocks.3.attn.weight; its parameters: ",
          absl::StrJoin(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
          names.size() > shown ? ", ..." : "", ")"));
    }
    if (stacks.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          KeyOf(key, "lr_decay"), ": the model has ", stacks.size(), " stacks of numbered blocks (",
          absl::StrJoin(stacks, ", "), "); name the one to decay over with ",
          KeyOf(key, "lr_decay_blocks"), "=PREFIX"));
    }
    prefix = stacks.front();
  }
  LayerIds ids;
  for (const auto& name : names) {
    if (auto block = BlockUnder(prefix, name))
      ids.num_layers = std::max(ids.num_layers, *block + 1);
  }
  bool seen_block = false;
  for (const auto& name : names) {
    auto block = BlockUnder(prefix, name);
    seen_block = seen_block || block.has_value();
    ids.of[name] = block ? *block + 1 : (seen_block ? ids.num_layers + 1 : 0);
  }
  return ids;
}

std::string FirstMatching(const std::vector<std::string>& globs, const std::string& name) {
  for (const auto& glob : globs) {
    if (GlobMatches(glob, name)) return glob;
  }
  return "";
}

}  // namespace

ParamGroupPlan::ParamGroupPlan(std::vector<Spec> specs, std::optional<double> lr_decay,
                               std::optional<std::string> lr_decay_blocks, std::string key)
    : specs_(std::move(specs)),
      lr_decay_(lr_decay),
      lr_decay_blocks_(std::move(lr_decay_blocks)),
      key_(std::move(key)) {}

absl::StatusOr<std::vector<ParamGroupPlan::Slot>> ParamGroupPlan::Assign(
    const NamedParameters& params, const std::vector<std::string>& model_names) const {
  std::vector<std::string> names = model_names;
  if (names.empty()) {
    for (const auto& [name, tensor] : params) names.push_back(name);
  }
  std::map<std::string, size_t> spec_of;
  for (size_t s = 1; s < specs_.size(); ++s) {
    const Spec& spec = specs_[s];
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> matched,
                          NamesMatching(names, spec.globs, KeyOf(spec.key, "params")));
    for (const auto& name : matched) {
      auto [it, fresh] = spec_of.emplace(name, s);
      if (!fresh) {
        const Spec& first = specs_[it->second];
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is in two parameter groups: ", first.key, " ('",
                         FirstMatching(first.globs, name), "') and ", spec.key, " ('",
                         FirstMatching(spec.globs, name),
                         "'); a parameter can be in one group only, as in torch.optim"));
      }
    }
  }
  LayerIds layers;
  if (lr_decay_) {
    KILN_ASSIGN_OR_RETURN(layers, BlockLayers(names, lr_decay_blocks_, key_));
  }

  // (spec, -layer, no_decay): the rest first, the head's layer first, decayed before not.
  std::map<std::tuple<size_t, int64_t, bool>, Slot> slots;
  std::unordered_set<const void*> seen;
  for (const auto& [name, tensor] : params) {
    // Tied weights appear under several names; torch would step them once per appearance.
    if (!seen.insert(tensor.unsafeGetTensorImpl()).second) continue;
    auto spec = spec_of.find(name);
    size_t s = spec == spec_of.end() ? 0 : spec->second;
    auto layer = layers.of.find(name);
    int64_t l = lr_decay_ && layer != layers.of.end() ? layer->second : -1;
    bool no_decay = specs_[s].no_decay_norm_and_bias && tensor.dim() <= 1;
    Slot& slot = slots[{s, -l, no_decay}];
    slot.spec = s;
    slot.layer = l;
    slot.lr_scale =
        l >= 0 ? std::pow(*lr_decay_, static_cast<double>(layers.num_layers + 1 - l)) : 1.0;
    slot.no_decay = no_decay;
    slot.params.push_back(tensor);
    slot.names.push_back(name);
  }
  std::vector<Slot> out;
  for (auto& [order, slot] : slots) out.push_back(std::move(slot));
  return out;
}

std::string ParamGroupPlan::Describe(size_t index, const Slot& slot, double lr,
                                     double weight_decay) const {
  std::string what = slot.spec == 0 ? "the rest" : specs_[slot.spec].key;
  if (slot.layer >= 0)
    absl::StrAppend(&what, ", layer ", slot.layer, " (lr x ", slot.lr_scale, ")");
  size_t shown = std::min<size_t>(slot.names.size(), 3);
  return absl::StrCat("pg", index, ": lr ", lr, ", weight_decay ", weight_decay, ", ",
                      slot.params.size(), " tensors, ", what, ": ",
                      absl::StrJoin(slot.names.begin(),
                                    slot.names.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                      slot.names.size() > shown ? ", ..." : "");
}

namespace internal {

absl::StatusOr<config::NodePtr> ParamGroupNode(const ParamGroupsOptions& o,
                                               const OptionContext& context, size_t index,
                                               std::vector<std::string>* globs) {
  const config::NodePtr& group = o.param_groups->items()[index];
  std::string key = context.FullKey(absl::StrCat("param_groups.", index));
  if (!group->is_map()) {
    return OptionValueError(key, context.component(),
                            "a mapping {params: [globs], OPTION: value, ...}", *group);
  }
  config::NodePtr params = group->Find("params");
  using Globs = internal::OptionField<std::vector<std::string>>;
  if (params == nullptr || !Globs::Accepts(*params) || params->size() == 0) {
    return OptionValueError(KeyOf(key, "params"), context.component(),
                            "a non-empty list of parameter-name globs ([head.*, fc*])",
                            params != nullptr ? *params : *config::Node::Null());
  }
  *globs = Globs::From(*params);
  config::NodePtr node = context.options().node()->Clone();
  const char* const kOptimizerWide[] = {"param_groups", "lr_decay", "lr_decay_blocks"};
  for (const char* name : kOptimizerWide) node->Erase(name);
  for (const auto& [name, value] : group->entries()) {
    if (name == "params") continue;
    if (std::find(std::begin(kOptimizerWide), std::end(kOptimizerWide), name) !=
        std::end(kOptimizerWide)) {
      return OptionValueError(KeyOf(key, name), context.component(),
                              "set for the whole optimizer, not in a group", *value);
    }
    node->Set(name, value);
  }
  return node;
}

}  // namespace internal
}  // namespace kiln
