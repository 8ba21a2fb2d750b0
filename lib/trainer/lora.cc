#include "lib/trainer/lora.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"
#include "lib/registry/options.h"
#include "lib/weights/safetensors.h"

namespace kiln {
namespace {

constexpr char kPrefix[] = "base_model.model.";
// The largest rank kiln takes: far above any layer's width, and safely inside int64_t when it
// comes as a JSON number (a double).
constexpr int64_t kMaxRank = int64_t{1} << 20;

const OptionBinding<LoraOptions>& LoraBinding() {
  static const auto* binding = new OptionBinding<LoraOptions>(
      OptionBinding<LoraOptions>()
          .Field("r", &LoraOptions::r, "rank of the adapters", AtLeast(1))
          .Field("alpha", &LoraOptions::alpha, "the adapters' output is scaled by alpha / r",
                 GreaterThan(0))
          .Field("dropout", &LoraOptions::dropout, "dropout on the adapters' input",
                 InHalfOpenRange(0, 1))
          .Field("target_modules", &LoraOptions::target_modules,
                 "the layers that get adapters, by last name or full name (q_proj, v_proj, "
                 "c_attn, ...), or all-linear: every layer that can carry one; a string is "
                 "PEFT's regular expression, which a layer's full name matches whole")
          .Field("exclude_modules", &LoraOptions::exclude_modules,
                 "layers that get no adapter although target_modules names them, by last or "
                 "full name, or a regular expression as a string (PEFT's exclude_modules)")
          .Field("layers_to_transform", &LoraOptions::layers_to_transform,
                 "only the targeted layers of these numbered blocks get adapters (PEFT's "
                 "layers_to_transform); empty: every block")
          .Field("layers_pattern", &LoraOptions::layers_pattern,
                 "the name before the block's number, for layers_to_transform (layers, h, ...; "
                 "PEFT's layers_pattern); empty: the first number in the layer's name")
          .Field("use_rslora", &LoraOptions::use_rslora,
                 "rsLoRA: the adapters' output scaled by alpha / sqrt(r), not alpha / r "
                 "(PEFT's use_rslora)")
          .Field("use_dora", &LoraOptions::use_dora,
                 "DoRA: each adapted weight's rows scaled to trained magnitudes, "
                 "m / |W + s B A| (W + s B A) (PEFT's use_dora)")
          .Field("rank_pattern", &LoraOptions::rank_pattern,
                 "{NAME: r} for the layers NAME matches (PEFT's rank_pattern); the others take r")
          .Field("alpha_pattern", &LoraOptions::alpha_pattern,
                 "{NAME: alpha} for the layers NAME matches (PEFT's alpha_pattern); the others "
                 "take alpha")
          .Field("modules_to_save", &LoraOptions::modules_to_save,
                 "modules that train whole beside the adapters and are saved with them: those "
                 "whose full names end with one of these (PEFT's modules_to_save); a classifier's "
                 "head (classifier, score) always does")
          .Field("bias", &LoraOptions::bias,
                 "biases that train beside the adapters (PEFT's bias): none; all, every "
                 "parameter named bias, the norms' too; lora_only, the adapted layers'",
                 OneOf({"none", "all", "lora_only"}))
          .Field("lora_bias", &LoraOptions::lora_bias,
                 "lora_B with a bias, scaled with B A and merged into the layer's bias (PEFT's "
                 "lora_bias); the adapted layers must have biases")
          .Field("trainable_token_indices", &LoraOptions::trainable_token_indices,
                 "ids of the token table's rows that train beside the adapters, the rest of the "
                 "table frozen (PEFT's trainable_token_indices); {MODULE: ids} names the layers: "
                 "the table, an untied head (lm_head); a tied head reads the table's rows")
          .Field("from", &LoraOptions::from,
                 "a folder PEFT saved (adapter_config.json, adapter_model.safetensors): its "
                 "adapters, instead of new ones")
          .Field("base_dtype", &LoraOptions::base_dtype,
                 "dtype of the frozen Linear weights: float32, or bfloat16 (half their memory; "
                 "the adapters train in float32)",
                 OneOf({"float32", "bfloat16"})));
  return *binding;
}

// PEFT's SEQ_CLS task trains these heads whole (PeftModelForSequenceClassification).
const std::vector<std::string>& ClassifierHeads() {
  static const auto* heads = new std::vector<std::string>{"classifier", "score"};
  return *heads;
}

std::string LastName(const std::string& name) { return name.substr(name.rfind('.') + 1); }

bool Within(const std::string& name, const std::vector<std::string>& modules) {
  return std::any_of(modules.begin(), modules.end(), [&](const std::string& m) {
    return name == m || absl::StartsWith(name, m + ".");
  });
}

bool IsAllLinear(const std::vector<std::string>& targets) {
  return targets.size() == 1 && targets[0] == kAllLinear;
}

// PEFT's list matching (check_target_module_exists): the target is the module's full name, or
// ends it after a dot.
bool Names(const std::string& target, const std::string& module) {
  return module == target || absl::EndsWith(module, "." + target);
}

bool NamesAny(const std::vector<std::string>& names, const std::string& module) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return Names(n, module); });
}

// A layer name's part that PEFT's regular expressions would read as itself (letters, digits, _, -;
// dots, which they would also let match any character).
bool PlainName(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

// The block index of the layer `module` as PEFT's check_target_module_exists finds it for
// layers_to_transform: the number that follows the first of `patterns` (in their order) that
// appears as whole segments of the name; with no patterns, the first number that follows the
// name's second segment or a later one. The number must be a whole segment, not the last.
std::optional<int64_t> LayerIndex(const std::string& module,
                                  const std::vector<std::string>& patterns) {
  const std::vector<std::string> s = absl::StrSplit(module, '.');
  auto number = [&](size_t i) -> std::optional<int64_t> {
    if (i + 1 >= s.size() || s[i].empty() || s[i].size() > 9 ||
        !std::all_of(s[i].begin(), s[i].end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }))
      return std::nullopt;
    return std::stoll(s[i]);
  };
  if (patterns.empty()) {
    for (size_t k = 1; k + 1 < s.size(); ++k) {
      if (auto n = number(k + 1)) return n;
    }
    return std::nullopt;
  }
  for (const std::string& pattern : patterns) {
    const std::vector<std::string> p = absl::StrSplit(pattern, '.');
    for (size_t j = 0; j + p.size() < s.size(); ++j) {
      if (!std::equal(p.begin(), p.end(), s.begin() + static_cast<std::ptrdiff_t>(j))) continue;
      if (auto n = number(j + p.size())) return n;
    }
  }
  return std::nullopt;
}

// Whether `pattern`, one of PEFT's regular expressions (Python's re), reads the same to
// std::regex's ECMAScript grammar (LoraSelection's comment in lora.h): refused in one line that
// starts with `where`, a pattern longer than 1000 characters, Python's own syntax, a count of 5
// digits, or one std::regex cannot compile.
absl::Status CheckRegex(const std::string& pattern, const std::string& where) {
  constexpr size_t kLongest = 1000;
  if (pattern.size() > kLongest)
    return absl::InvalidArgumentError(absl::StrCat(where, "a regular expression of ",
                                                   pattern.size(), " characters; kiln reads up to ",
                                                   kLongest));
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    const char c = pattern[i], next = pattern[i + 1];
    std::string python;
    if (c == '\\' && (absl::ascii_isdigit(static_cast<unsigned char>(next)) ||
                      std::string_view("AZzGNUapPg").find(next) != std::string_view::npos)) {
      python = pattern.substr(i, 2);
    } else if (c == '(' && next == '?' &&
               (i + 2 == pattern.size() ||
                std::string_view(":=!").find(pattern[i + 2]) == std::string_view::npos)) {
      python = pattern.substr(i, 3);
    }
    if (!python.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          where, "'", pattern, "' uses ", python,
          ", which Python's re reads and kiln's regular expressions (ECMAScript's grammar) read "
          "otherwise or not at all"));
    if (c == '\\') ++i;
  }
  // libstdc++ reads a repetition's count ({m,n}) into a long without a bound, which is undefined
  // past its range; layer names need no count of 5 digits.
  for (size_t i = 0, run = 0; i < pattern.size(); ++i) {
    run = absl::ascii_isdigit(static_cast<unsigned char>(pattern[i])) ? run + 1 : 0;
    if (run == 5 && i >= 5 && (pattern[i - 5] == '{' || pattern[i - 5] == ','))
      return absl::InvalidArgumentError(
          absl::StrCat(where, "'", pattern, "' repeats something more than 9999 times (",
                       pattern.substr(i - 5, 6), "...); kiln reads counts of up to 4 digits"));
  }
  try {
    std::regex compiled(pattern, std::regex::ECMAScript);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "'", pattern, "' is not a regular expression (", e.what(), ")"));
  }
  return absl::OkStatus();
}

// A predicate: whether a layer's full name matches `pattern` whole (re.fullmatch), without
// backtracking where the library has a polynomial executor (libstdc++'s); a pattern that does not
// compile matches nothing (CheckRegex refuses it first).
std::function<bool(const std::string&)> FullMatch(const std::string& pattern) {
  auto flags = std::regex::ECMAScript;
#ifdef __GLIBCXX__
  flags |= std::regex_constants::__polynomial;
#endif
  std::shared_ptr<const std::regex> re;
  try {
    re = std::make_shared<const std::regex>(pattern, flags);
  } catch (const std::exception&) {
    return [](const std::string&) { return false; };
  }
  return [re](const std::string& name) {
    try {
      return std::regex_match(name, *re);
    } catch (const std::exception&) {
      return false;
    }
  };
}

// One entry of PEFT's rank_pattern or alpha_pattern: its key, and whether a layer's full name
// matches it (PEFT's get_pattern_key: `(.*\.)?(KEY)` whole).
struct PatternEntry {
  std::string name;
  std::function<bool(const std::string&)> matches;
  double value = 0;
};

// `key` (rank_pattern or alpha_pattern) of model.lora or of adapter_config.json, in its order
// (PEFT takes the first key that matches). Refused in one line that starts with `where`: a key
// CheckRegex refuses, a rank that is not a positive integer, an alpha that is not a positive
// number.
absl::StatusOr<std::vector<PatternEntry>> ReadPattern(const config::NodePtr& node,
                                                      const std::string& key,
                                                      const std::string& where) {
  std::vector<PatternEntry> out;
  if (node == nullptr || node->is_null()) return out;
  if (!node->is_map())
    return absl::InvalidArgumentError(
        absl::StrCat(where, key, " must be a mapping of layer name: value"));
  const bool rank = key == "rank_pattern";
  for (const auto& [name, value] : node->entries()) {
    PatternEntry e;
    e.name = name;
    KILN_RETURN_IF_ERROR(CheckRegex(name, absl::StrCat(where, key, ": ")));
    e.matches = FullMatch(absl::StrCat("(.*\\.)?(", name, ")"));
    const bool integer = value != nullptr && value->kind() == config::NodeKind::kInt;
    const bool number = integer || (value != nullptr && value->kind() == config::NodeKind::kFloat);
    e.value = !number ? 0 : integer ? static_cast<double>(value->as_int()) : value->as_float();
    if ((rank && (!integer || e.value > static_cast<double>(kMaxRank))) || !number || e.value <= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          where, key, ".", name, ": ", value ? config::PythonStr(*value) : "null",
          rank ? " is not a positive integer rank up to 1048576" : " is not a positive alpha"));
    out.push_back(std::move(e));
  }
  return out;
}

// The value of the first entry of `pattern` that matches the layer `module`, if any.
std::optional<double> PatternValue(const std::vector<PatternEntry>& pattern,
                                   const std::string& module) {
  for (const PatternEntry& e : pattern) {
    if (e.matches(module)) return e.value;
  }
  return std::nullopt;
}

// The full names of the layers of `model` that carry an adapter.
std::set<std::string> AdaptedNames(torch::nn::Module& model) {
  std::set<std::string> adapted;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto* layer = dynamic_cast<LoraLayer*>(item.value().get());
    if (layer != nullptr && layer->has_lora()) adapted.insert(item.key());
  }
  return adapted;
}

// The parameters PEFT's `bias` trains beside the adapters (LoraOptions::bias), by name, outside the
// modules that train whole (`saved`): "all", every one named bias; "lora_only", the adapted
// layers' (`adapted`: AdaptedNames(model)).
std::vector<std::string> TrainedBiases(torch::nn::Module& model, const std::string& bias,
                                       const std::vector<std::string>& saved,
                                       const std::set<std::string>& adapted) {
  std::vector<std::string> names;
  if (bias == "none") return names;
  for (const auto& p : model.named_parameters()) {
    const std::string& name = p.key();
    if ((name != "bias" && !absl::EndsWith(name, ".bias")) || absl::StrContains(name, ".lora_"))
      continue;  // lora_B's own bias (lora_bias) is the adapter's
    const std::string module = name.size() > 5 ? name.substr(0, name.size() - 5) : "";
    if (!Within(name, saved) && (bias == "all" || adapted.count(module) != 0))
      names.push_back(name);
  }
  return names;
}

// The key PEFT saves the parameter `name` under: an adapted layer's bias (`adapted`:
// AdaptedNames) is its base layer's (NAME.base_layer.bias), trainable tokens' rows its token
// adapter's (NAME.token_adapter.trainable_tokens_delta), any other its own name, after
// base_model.model.
std::string PeftKey(const std::set<std::string>& adapted, const std::string& name) {
  const std::string tokens = ".trainable_tokens_delta";
  if (absl::EndsWith(name, tokens))
    return absl::StrCat(kPrefix, name.substr(0, name.size() - tokens.size()), ".token_adapter",
                        tokens);
  if (absl::EndsWith(name, ".bias")) {
    const std::string module = name.substr(0, name.size() - 5);
    if (adapted.count(module) != 0) return kPrefix + module + ".base_layer.bias";
  }
  return kPrefix + name;
}

// PEFT's `key` (target_modules, exclude_modules) given as `text`, a string: target_modules'
// all-linear shorthand (any case) into `list`, else a regular expression into `regex` (CheckRegex
// refuses it in one line that starts with `where`).
absl::Status StringTargets(const std::string& key, const std::string& text,
                           const std::string& where, std::vector<std::string>* list,
                           std::string* regex) {
  if (key == "target_modules" && absl::AsciiStrToLower(text) == kAllLinear) {
    *list = {kAllLinear};
    return absl::OkStatus();
  }
  KILN_RETURN_IF_ERROR(CheckRegex(text, absl::StrCat(where, key, ": ")));
  *regex = text;
  return absl::OkStatus();
}

// PEFT's trainable_token_indices, `n`: a list of token ids, or {MODULE: ids}, into `o`. Refused in
// one line that starts with `where`: another form, an id that is not a non-negative integer or
// comes twice in a list, a module with an empty list.
absl::Status ReadTrainableTokens(const config::NodePtr& n, const std::string& where,
                                 LoraOptions* o) {
  o->trainable_token_indices.clear();
  o->trainable_tokens_named.clear();
  if (n == nullptr || n->is_null()) return absl::OkStatus();
  auto ids = [&](const config::NodePtr& list, const std::string& key,
                 std::vector<int64_t>* out) -> absl::Status {
    if (list == nullptr || !list->is_list())
      return absl::InvalidArgumentError(
          absl::StrCat(key, " must be a list of token ids, or {MODULE: [ids]}"));
    std::set<int64_t> seen;
    for (const auto& item : list->items()) {
      if (item == nullptr || item->kind() != config::NodeKind::kInt || item->as_int() < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(key, ": ", item ? config::PythonStr(*item) : "null",
                         " is not a token id (a non-negative integer)"));
      if (!seen.insert(item->as_int()).second)
        return absl::InvalidArgumentError(
            absl::StrCat(key, ": token ", item->as_int(), " is listed twice"));
      out->push_back(item->as_int());
    }
    return absl::OkStatus();
  };
  const std::string key = absl::StrCat(where, "trainable_token_indices");
  if (!n->is_map()) return ids(n, key, &o->trainable_token_indices);
  for (const auto& [module, list] : n->entries()) {
    o->trainable_tokens_named.emplace_back(module, std::vector<int64_t>());
    KILN_RETURN_IF_ERROR(
        ids(list, absl::StrCat(key, ".", module), &o->trainable_tokens_named.back().second));
    if (o->trainable_tokens_named.back().second.empty())
      return absl::InvalidArgumentError(absl::StrCat(key, ".", module, " lists no token"));
  }
  return absl::OkStatus();
}

// The keys of adapter_config.json that kiln reads, and those that do not change what a trained
// adapter computes (how it was initialized, bookkeeping, settings of options that are unset).
bool ReadOrHarmless(const std::string& key) {
  static const auto* keys = new std::set<std::string>{"peft_type",
                                                      "task_type",
                                                      "r",
                                                      "lora_alpha",
                                                      "lora_dropout",
                                                      "target_modules",
                                                      "exclude_modules",
                                                      "modules_to_save",
                                                      "bias",
                                                      "use_rslora",
                                                      "use_dora",
                                                      "fan_in_fan_out",
                                                      "inference_mode",
                                                      "init_lora_weights",
                                                      "base_model_name_or_path",
                                                      "revision",
                                                      "auto_mapping",
                                                      "peft_version",
                                                      "layers_pattern",
                                                      "layers_to_transform",
                                                      "qalora_group_size",
                                                      "megatron_core",
                                                      "loftq_config",
                                                      "eva_config",
                                                      "corda_config",
                                                      "lora_ga_config",
                                                      "ensure_weight_tying",
                                                      "rank_pattern",
                                                      "alpha_pattern",
                                                      "lora_bias",
                                                      "trainable_token_indices"};
  return keys->count(key) != 0;
}

// A value PEFT leaves at its default: null, false, an empty map, list or string.
bool Unset(const config::Node& n) {
  return n.is_null() || (n.kind() == config::NodeKind::kBool && !n.as_bool()) ||
         ((n.is_map() || n.is_list()) && n.size() == 0) ||
         (n.kind() == config::NodeKind::kString && n.as_string().empty());
}

// adapter_config.json's r, lora_alpha, lora_dropout, use_rslora, use_dora, target_modules and
// exclude_modules (lists, all-linear, or regular expressions), modules_to_save, rank_pattern,
// alpha_pattern, layers_to_transform, layers_pattern, bias, lora_bias and trainable_token_indices,
// into `o` (replacing its own). Any other setting that changes what the adapter computes
// (target_parameters, aLoRA, ...) is refused in one line rather than loaded as something else.
absl::Status ReadAdapterConfig(const std::string& dir, LoraOptions* o) {
  const std::string path = dir + "/adapter_config.json";
  if (!IsRegularFile(path)) {
    return absl::NotFoundError(absl::StrCat("model.lora.from: ", dir,
                                            " holds no adapter_config.json (a folder PEFT's "
                                            "save_pretrained wrote)"));
  }
  KILN_ASSIGN_OR_RETURN(config::NodePtr root, config::LoadYamlFile(path));
  if (root == nullptr || !root->is_map())
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  auto text = [&](const char* key) -> std::string {
    config::NodePtr n = root->Find(key);
    return n && n->is_scalar() && !n->is_null() ? config::PythonStr(*n) : "";
  };
  if (text("peft_type") != "LORA")
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": peft_type is '", text("peft_type"), "'; kiln reads LORA adapters"));
  for (const auto& [key, value] : root->entries()) {
    if (!ReadOrHarmless(key) && value != nullptr && !Unset(*value))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", key,
                       " is set; kiln reads LoRA, rsLoRA and DoRA adapters without it (it "
                       "changes what the adapter computes)"));
  }
  auto flag = [&](const char* key) { return text(key) == "True" || text(key) == "true"; };
  o->use_rslora = flag("use_rslora");
  o->use_dora = flag("use_dora");
  o->lora_bias = flag("lora_bias");
  o->bias = text("bias").empty() ? "none" : text("bias");
  if (o->bias != "none" && o->bias != "all" && o->bias != "lora_only")
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bias is '", o->bias, "'; kiln reads PEFT's none, all and lora_only"));
  auto number = [&](const char* key, double* out) -> absl::Status {
    config::NodePtr n = root->Find(key);
    if (n == nullptr ||
        !(n->kind() == config::NodeKind::kInt || n->kind() == config::NodeKind::kFloat))
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is not a number"));
    *out = n->kind() == config::NodeKind::kInt ? static_cast<double>(n->as_int()) : n->as_float();
    return absl::OkStatus();
  };
  double r = 0;
  KILN_RETURN_IF_ERROR(number("r", &r));
  KILN_RETURN_IF_ERROR(number("lora_alpha", &o->alpha));
  if (root->Find("lora_dropout")) KILN_RETURN_IF_ERROR(number("lora_dropout", &o->dropout));
  if (!(r >= 1 && r <= static_cast<double>(kMaxRank) && r == std::floor(r)))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": r is ", r, "; kiln reads ranks from 1 to ", kMaxRank));
  o->r = static_cast<int64_t>(r);
  // A list of names; a string as PEFT's (StringTargets, where `regex` takes one); absent or null,
  // none.
  auto names = [&](const std::string& key, std::vector<std::string>* out,
                   std::string* regex) -> absl::Status {
    out->clear();
    if (regex != nullptr) regex->clear();
    config::NodePtr n = root->Find(key);
    if (n && n->is_list()) {
      for (const auto& t : n->items()) out->push_back(config::PythonStr(*t));
    } else if (n && n->kind() == config::NodeKind::kString && !n->as_string().empty()) {
      if (regex == nullptr)
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is the string '",
                                                       n->as_string(),
                                                       "'; kiln reads a list of module names"));
      return StringTargets(key, n->as_string(), absl::StrCat(path, ": "), out, regex);
    }
    return absl::OkStatus();
  };
  KILN_RETURN_IF_ERROR(names("target_modules", &o->target_modules, &o->target_regex));
  KILN_RETURN_IF_ERROR(names("exclude_modules", &o->exclude_modules, &o->exclude_regex));
  KILN_RETURN_IF_ERROR(names("modules_to_save", &o->modules_to_save, nullptr));
  // layers_to_transform: an index or a list of them; layers_pattern: a name or a list of them.
  auto one_or_many = [&](const char* key) -> std::vector<config::NodePtr> {
    config::NodePtr n = root->Find(key);
    if (n == nullptr || n->is_null()) return {};
    return n->is_list() ? n->items() : std::vector{n};
  };
  o->layers_to_transform.clear();
  o->layers_pattern.clear();
  for (const auto& item : one_or_many("layers_to_transform")) {
    if (item == nullptr || item->kind() != config::NodeKind::kInt || item->as_int() < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": layers_to_transform must be a block index or a list of them"));
    o->layers_to_transform.push_back(item->as_int());
  }
  for (const auto& item : one_or_many("layers_pattern")) {
    const std::string name = item != nullptr && item->is_scalar() ? config::PythonStr(*item) : "";
    if (!PlainName(name))
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": layers_pattern '", name,
          "' is a regular expression to PEFT; kiln takes the name before the block's number "
          "(layers, h)"));
    o->layers_pattern.push_back(name);
  }
  o->rank_pattern = root->Find("rank_pattern");
  o->alpha_pattern = root->Find("alpha_pattern");
  KILN_RETURN_IF_ERROR(
      ReadTrainableTokens(root->Find("trainable_token_indices"), absl::StrCat(path, ": "), o));
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    KILN_RETURN_IF_ERROR(ReadPattern(root->Find(key), key, absl::StrCat(path, ": ")).status());
  if (o->r < 1 || (o->target_modules.empty() && o->target_regex.empty()))
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": r must be positive and target_modules a non-empty list or a regular expression"));
  return LoraSelection::Make(*o, absl::StrCat(path, ": ")).status();
}

}  // namespace

absl::StatusOr<std::optional<LoraOptions>> ReadLoraOptions(const config::Config& job) {
  if (!job.Has("model.lora")) return std::optional<LoraOptions>();
  KILN_ASSIGN_OR_RETURN(config::NodePtr node, job.Get<config::NodePtr>("model.lora"));
  if (node == nullptr || node->is_null()) return std::optional<LoraOptions>();
  // PEFT's string forms of target_modules and exclude_modules (all-linear, or a regular
  // expression), as lists for the schema: all-linear's one item, or an empty list beside the
  // regular expression.
  std::string regex[2];
  std::vector<std::string> lists[2];
  const char* const kStringKeys[2] = {"target_modules", "exclude_modules"};
  for (int k = 0; k < 2; ++k) {
    config::NodePtr value = node->is_map() ? node->Find(kStringKeys[k]) : nullptr;
    if (value == nullptr || value->kind() != config::NodeKind::kString) continue;
    absl::Status read =
        StringTargets(kStringKeys[k], value->as_string(), "model.lora.", &lists[k], &regex[k]);
    if (std::string where = value->source().Describe(); !read.ok() && !where.empty())
      return absl::InvalidArgumentError(absl::StrCat(read.message(), " (set at ", where, ")"));
    KILN_RETURN_IF_ERROR(read);
    node = node->Clone();
    config::NodePtr list = config::Node::List();
    for (const std::string& item : lists[k]) list->Append(config::Node::String(item));
    list->set_source(value->source());
    node->Set(kStringKeys[k], list);
  }
  // trainable_token_indices as {MODULE: ids}: read beside the schema, which takes a list.
  LoraOptions tokens;
  config::NodePtr token_node = node->is_map() ? node->Find("trainable_token_indices") : nullptr;
  KILN_RETURN_IF_ERROR(ReadTrainableTokens(token_node, "model.lora.", &tokens));
  if (token_node != nullptr && token_node->is_map()) {
    node = node->Clone();
    node->Set("trainable_token_indices", config::Node::List());
  }
  KILN_ASSIGN_OR_RETURN(config::NodePtr filled,
                        LoraBinding().schema().Apply(*node, "model.lora", "model.lora"));
  LoraOptions o = LoraBinding().Fill(config::Config(filled, "model.lora"));
  o.trainable_token_indices = tokens.trainable_token_indices;
  o.trainable_tokens_named = tokens.trainable_tokens_named;
  o.target_regex = regex[0];
  o.exclude_regex = regex[1];
  if (o.from.empty() && o.target_modules.empty() && o.target_regex.empty()) {
    return absl::InvalidArgumentError(
        "model.lora.target_modules: name the layers that get adapters (e.g. [q_proj, v_proj]), "
        "or give model.lora.from=DIR");
  }
  if (o.r > kMaxRank)
    return absl::InvalidArgumentError(
        absl::StrCat("model.lora.r is ", o.r, "; kiln reads ranks from 1 to ", kMaxRank));
  KILN_RETURN_IF_ERROR(ReadPattern(o.rank_pattern, "rank_pattern", "model.lora.").status());
  KILN_RETURN_IF_ERROR(ReadPattern(o.alpha_pattern, "alpha_pattern", "model.lora.").status());
  KILN_RETURN_IF_ERROR(LoraSelection::Make(o, "model.lora.").status());
  // An adapter folder's own settings (targets, modules_to_save) stand in for the config's, for
  // every reader of the job's options (AddLora, export format=peft).
  if (!o.from.empty()) KILN_RETURN_IF_ERROR(ReadAdapterConfig(o.from, &o));
  return std::optional<LoraOptions>(o);
}

namespace {

// PEFT's trainable tokens (LoraOptions::trainable_token_indices) added to the layers of `modules`
// that they name; "K tokens of NAME" for each. Refused in one line: a name that finds no layer, or
// one that cannot train tokens, a layer named twice, one that carries a LoRA adapter or trains
// whole (modules_to_save, `saved`), an id outside the layer's rows.
absl::StatusOr<std::vector<std::string>> AddTrainableTokens(
    const torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>& modules,
    const LoraOptions& o, const std::vector<std::string>& saved) {
  const char* const kWhich =
      " (a token table can: llama's embed_tokens, GPT-2's wte, BERT's word_embeddings; and an "
      "untied output head: llama's lm_head; a tied head reads the table's trained rows)";
  std::vector<std::pair<std::string, std::vector<int64_t>>> wanted = o.trainable_tokens_named;
  if (!o.trainable_token_indices.empty()) wanted.emplace_back("", o.trainable_token_indices);
  std::vector<std::string> added;
  std::set<std::string> done;
  for (const auto& [key, ids] : wanted) {
    const std::string where =
        absl::StrCat("model.lora.trainable_token_indices", key.empty() ? "" : ".", key, ": ");
    std::vector<std::pair<std::string, torch::nn::Module*>> found;
    for (const auto& item : modules) {
      auto* layer = dynamic_cast<LoraLayer*>(item.value().get());
      // The list: the token table; a name: each module whose full name ends with it (PEFT's).
      if (key.empty() ? layer != nullptr && layer->is_token_table()
                      : absl::EndsWith(item.key(), key))
        found.emplace_back(item.key(), item.value().get());
    }
    if (found.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       key.empty() ? "the model has no token table"
                                   : absl::StrCat("'", key, "' names no module of the model"),
                       kWhich));
    for (const auto& [name, module] : found) {
      auto* layer = dynamic_cast<LoraLayer*>(module);
      if (layer == nullptr || !layer->can_train_tokens())
        return absl::InvalidArgumentError(
            absl::StrCat(where, name, " cannot train tokens", kWhich));
      if (!done.insert(name).second)
        return absl::InvalidArgumentError(absl::StrCat(where, name, " is named twice"));
      if (layer->has_lora())
        return absl::InvalidArgumentError(
            absl::StrCat(where, name,
                         " carries a LoRA adapter too (target_modules); train its tokens or adapt "
                         "it, not both"));
      if (Within(name, saved))
        return absl::InvalidArgumentError(absl::StrCat(
            where, name,
            " trains whole (modules_to_save); name it there or here, not both (as PEFT)"));
      const auto own = module->named_parameters(/*recurse=*/false);
      if (const torch::Tensor* bias = own.find("bias"); bias != nullptr && bias->defined())
        return absl::InvalidArgumentError(absl::StrCat(
            where, name,
            " has a bias, which PEFT's trainable tokens leave out of its outputs; kiln takes "
            "heads without one"));
      const int64_t rows = own["weight"].size(0);
      for (int64_t id : ids) {
        if (id >= rows)
          return absl::InvalidArgumentError(
              absl::StrCat(where, "token ", id, " is outside ", name, "'s ", rows, " rows"));
      }
      layer->AddTrainableTokens(ids);
      added.push_back(absl::StrCat(ids.size(), " tokens of ", name));
    }
  }
  return added;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AddLora(torch::nn::Module& model, LoraOptions o) {
  std::map<std::string, torch::Tensor> file;
  if (!o.from.empty()) {
    KILN_RETURN_IF_ERROR(ReadAdapterConfig(o.from, &o));
    const std::string weights = o.from + "/adapter_model.safetensors";
    if (!IsRegularFile(weights)) {
      return absl::NotFoundError(
          absl::StrCat("model.lora.from: ", o.from, " holds no adapter_model.safetensors"));
    }
    KILN_ASSIGN_OR_RETURN(file, ReadSafetensors(weights));
  }
  const auto modules = model.named_modules("", /*include_self=*/false);
  for (const std::string& m : o.modules_to_save) {
    // PEFT's SEQ_CLS files name both heads; a model has one of them.
    const bool head =
        std::find(ClassifierHeads().begin(), ClassifierHeads().end(), m) != ClassifierHeads().end();
    if (!head && std::none_of(modules.begin(), modules.end(),
                              [&](const auto& item) { return absl::EndsWith(item.key(), m); })) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora.modules_to_save: '", m, "' names no module of the model"));
    }
  }
  if (o.bias != "none" && o.base_dtype == "bfloat16")
    return absl::InvalidArgumentError(absl::StrCat(
        "model.lora.bias=", o.bias,
        " trains biases of layers whose weights model.lora.base_dtype=bfloat16 holds in bf16; "
        "kiln trains them with float32 weights only (base_dtype=float32)"));
  const std::vector<std::string> saved = ModulesToSave(model, o.modules_to_save);
  KILN_ASSIGN_OR_RETURN(const LoraSelection selection, LoraSelection::Make(o, "model.lora."));
  // The selected layers outside the modules that train whole; for all-linear, those that can carry
  // an adapter.
  std::vector<std::pair<std::string, torch::nn::Module*>> targets;
  for (const auto& item : modules) {
    if (!Within(item.key(), saved) && selection.Selects(item.key()) &&
        (!IsAllLinear(o.target_modules) ||
         (dynamic_cast<LoraLayer*>(item.value().get()) != nullptr &&
          dynamic_cast<torch::nn::LinearImpl*>(item.value().get()) != nullptr)))
      targets.emplace_back(item.key(), item.value().get());
  }
  std::set<std::string> matched;
  std::vector<std::string> names;
  for (auto& [name, module] : targets) {
    auto* layer = dynamic_cast<LoraLayer*>(module);
    if (layer == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora.target_modules: ", name,
                       " is not a layer that can carry an adapter (kiln's "
                       "Linear layers and token embeddings can)"));
    }
    names.push_back(name);
    for (const std::string& t : o.target_modules)
      if (Names(t, name)) matched.insert(t);
  }
  if (IsAllLinear(o.target_modules) && names.empty()) {
    return absl::InvalidArgumentError(
        "model.lora.target_modules: all-linear finds no layer that can carry an adapter in the "
        "model");
  }
  if (names.empty() && !o.layers_to_transform.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.lora.layers_to_transform: [", absl::StrJoin(o.layers_to_transform, ", "),
        "] leaves out every layer that target_modules names (no block of those numbers",
        o.layers_pattern.empty() ? ""
                                 : absl::StrCat(" after ", absl::StrJoin(o.layers_pattern, " or ")),
        "); no adapter would train"));
  }
  if (names.empty() && (!o.exclude_modules.empty() || !o.exclude_regex.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.lora.exclude_modules: ",
        o.exclude_regex.empty() ? absl::StrCat("[", absl::StrJoin(o.exclude_modules, ", "), "]")
                                : absl::StrCat("'", o.exclude_regex, "'"),
        " leaves out every layer that target_modules names; no adapter would train"));
  }
  if (names.empty() && !o.target_regex.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model.lora.target_modules: '", o.target_regex,
                                                   "' matches no layer's full name whole"));
  }
  // A target inside a module that trains whole is no error: PEFT lists a RoBERTa head's layers
  // among an all-linear adapter's targets, and trains them whole.
  for (const std::string& t : o.target_modules) {
    if (matched.count(t) != 0 || IsAllLinear(o.target_modules)) continue;
    if (std::none_of(modules.begin(), modules.end(),
                     [&](const auto& item) { return Names(t, item.key()); })) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora.target_modules: '", t, "' names no layer of the model"));
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<PatternEntry> ranks,
                        ReadPattern(o.rank_pattern, "rank_pattern", "model.lora."));
  KILN_ASSIGN_OR_RETURN(std::vector<PatternEntry> alphas,
                        ReadPattern(o.alpha_pattern, "alpha_pattern", "model.lora."));
  for (const auto* pattern : {&ranks, &alphas}) {
    for (const PatternEntry& e : *pattern) {
      if (std::none_of(names.begin(), names.end(),
                       [&](const std::string& n) { return e.matches(n); }))
        Logger::Instance().Warning(
            absl::StrCat("model.lora.", pattern == &ranks ? "rank" : "alpha", "_pattern: '", e.name,
                         "' matches no layer that gets an adapter; it changes nothing"));
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  std::set<int64_t> rank_set;
  if (o.lora_bias && o.use_dora)
    return absl::InvalidArgumentError(
        "model.lora.lora_bias: kiln's DoRA layers take no bias on lora_B; set lora_bias or "
        "use_dora, not both");
  for (auto& [name, module] : targets) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module);
    if (linear == nullptr && (o.use_dora || o.lora_bias))
      return absl::InvalidArgumentError(absl::StrCat(
          "model.lora.", o.use_dora ? "use_dora" : "lora_bias", ": ", name,
          " is an embedding; kiln's embedding adapters are plain LoRA (PEFT takes no lora_bias "
          "there either); leave it out of target_modules or set ",
          o.use_dora ? "use_dora" : "lora_bias", "=false"));
    if (o.lora_bias && (linear == nullptr || !linear->bias.defined()))
      return absl::InvalidArgumentError(absl::StrCat(
          "model.lora.lora_bias: ", name,
          " has no bias to merge lora_B's into (PEFT could not merge it either); leave it out of "
          "target_modules or set lora_bias=false"));
  }
  for (auto& [name, module] : targets) {
    LoraOptions layer = o;
    layer.r = static_cast<int64_t>(PatternValue(ranks, name).value_or(static_cast<double>(o.r)));
    layer.alpha = PatternValue(alphas, name).value_or(o.alpha);
    rank_set.insert(layer.r);
    dynamic_cast<LoraLayer*>(module)->AddLora(layer);
  }
  for (auto& item : model.named_parameters()) {
    if (Within(item.key(), saved)) item.value().set_requires_grad(true);
  }
  KILN_ASSIGN_OR_RETURN(const std::vector<std::string> tokens,
                        AddTrainableTokens(modules, o, saved));
  const std::set<std::string> adapted = AdaptedNames(model);
  const std::vector<std::string> biases = TrainedBiases(model, o.bias, saved, adapted);
  auto parameters = model.named_parameters();
  for (const std::string& b : biases) parameters[b].set_requires_grad(true);
  if (!o.from.empty()) {
    // PEFT's names: base_model.model.NAME.lora_A.weight, a saved module's tensors as
    // base_model.model.NAME.weight, a trained bias as PeftKey names it.
    int64_t loaded = 0;
    for (auto& item : model.named_parameters()) {
      if (!absl::StrContains(item.key(), ".lora_") && !Within(item.key(), saved) &&
          !absl::EndsWith(item.key(), ".trainable_tokens_delta") &&
          std::find(biases.begin(), biases.end(), item.key()) == biases.end())
        continue;
      const std::string key = PeftKey(adapted, item.key());
      auto it = file.find(key);
      if (it == file.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.lora.from: ", o.from, "/adapter_model.safetensors has no ", key));
      }
      if (it->second.sizes() != item.value().sizes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.lora.from: ", key, " is ", c10::str(it->second.sizes()),
                         " in the file and ", c10::str(item.value().sizes()), " in the model"));
      }
      item.value().copy_(it->second);
      ++loaded;
    }
    // PEFT saves an adapted embedding's table beside its adapter (save_embedding_layers, for a
    // vocabulary resized in fine-tuning) and loads it back over the base's; so does kiln, at the
    // base's size.
    for (const auto& [name, module] : targets) {
      auto* table = dynamic_cast<torch::nn::EmbeddingImpl*>(module);
      auto it = file.find(kPrefix + name + ".base_layer.weight");
      if (table == nullptr || it == file.end()) continue;
      if (it->second.sizes() != table->weight.sizes())
        return absl::InvalidArgumentError(absl::StrCat(
            "model.lora.from: ", it->first, " is ", c10::str(it->second.sizes()),
            " in the file and ", c10::str(table->weight.sizes()),
            " in the model (a vocabulary resized in fine-tuning; kiln loads the base's size)"));
      table->weight.copy_(it->second);
      ++loaded;
    }
    Logger::Instance().Info(absl::StrCat("model.lora.from ", o.from, ": ", loaded,
                                         " adapter tensors, r ", o.r, ", alpha ", o.alpha));
  }
  if (o.base_dtype == "bfloat16") {
    // Every frozen Linear weight (the layers that can carry an adapter compute in their weight's
    // dtype and return the input's), not the adapters, embeddings or norms.
    int64_t bytes = 0;
    for (const auto& m : model.modules()) {
      auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get());
      if (linear == nullptr || dynamic_cast<LoraLayer*>(m.get()) == nullptr ||
          linear->weight.requires_grad())
        continue;  // a module trained whole (modules_to_save) keeps float32
      for (torch::Tensor* t : {&linear->weight, &linear->bias}) {
        if (!t->defined() || t->scalar_type() == torch::kBFloat16) continue;
        bytes += t->numel() * 2;
        t->set_data(t->to(torch::kBFloat16));
      }
    }
    Logger::Instance().Info(
        absl::StrCat("model.lora.base_dtype=bfloat16: the frozen Linear "
                     "weights held in bf16, ",
                     bytes >> 20, " MB saved"));
  }
  int64_t trained = 0, total = 0;
  for (const auto& p : model.parameters()) {
    total += p.numel();
    if (p.requires_grad()) trained += p.numel();
  }
  Logger::Instance().Info(absl::StrCat(
      "model.lora: ", o.use_dora ? "DoRA " : "", "adapters of rank",
      rank_set.size() > 1 ? "s " : " ", absl::StrJoin(rank_set, ", "), " on ", names.size(),
      " layers",
      saved.empty() ? "" : absl::StrCat(", ", absl::StrJoin(saved, ", "), " trained whole"),
      tokens.empty() ? "" : absl::StrCat(", ", absl::StrJoin(tokens, ", ")), "; ", trained, " of ",
      total, " parameters train"));
  return names;
}

std::vector<std::string> ModulesToSave(torch::nn::Module& model,
                                       const std::vector<std::string>& modules_to_save) {
  std::vector<std::string> names = ClassifierHeads();
  names.insert(names.end(), modules_to_save.begin(), modules_to_save.end());
  std::vector<std::string> found;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    // PEFT's _set_trainable: a module whose name ends with one of them, the outermost.
    const bool named = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return absl::EndsWith(item.key(), n);
    });
    if (named && !Within(item.key(), found)) found.push_back(item.key());
  }
  return found;
}

absl::StatusOr<LoraSelection> LoraSelection::Make(const LoraOptions& o, const std::string& where) {
  LoraSelection s;
  s.o_ = o;
  if (!o.target_regex.empty()) {
    if (!o.layers_to_transform.empty() || !o.layers_pattern.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       "layers_to_transform and layers_pattern need target_modules as a "
                       "list of names, not a regular expression (as PEFT)"));
    KILN_RETURN_IF_ERROR(CheckRegex(o.target_regex, absl::StrCat(where, "target_modules: ")));
    s.target_regex_ = FullMatch(o.target_regex);
  }
  if (!o.exclude_regex.empty()) {
    KILN_RETURN_IF_ERROR(CheckRegex(o.exclude_regex, absl::StrCat(where, "exclude_modules: ")));
    s.exclude_regex_ = FullMatch(o.exclude_regex);
  }
  return s;
}

bool LoraSelection::Selects(const std::string& name) const {
  if (NamesAny(o_.exclude_modules, name) || (exclude_regex_ && exclude_regex_(name))) return false;
  if (target_regex_) return target_regex_(name);
  const bool all = IsAllLinear(o_.target_modules);
  if (all ? name == "lm_head" : !NamesAny(o_.target_modules, name)) return false;
  // layers_to_transform, as PEFT: not for a layer that target_modules names by its full name.
  const bool full_name = !all && std::find(o_.target_modules.begin(), o_.target_modules.end(),
                                           name) != o_.target_modules.end();
  if (full_name || o_.layers_to_transform.empty()) return true;
  std::optional<int64_t> index = LayerIndex(name, o_.layers_pattern);
  return index.has_value() &&
         std::find(o_.layers_to_transform.begin(), o_.layers_to_transform.end(), *index) !=
             o_.layers_to_transform.end();
}

void TrainableTokenRows::Add(torch::nn::Module& layer, const torch::Tensor& weight,
                             const std::vector<int64_t>& ids) {
  torch::NoGradGuard no_grad;
  ids_ = ids;
  index_ = torch::tensor(ids, torch::kInt64).to(weight.device());
  delta = layer.register_parameter("trainable_tokens_delta",
                                   weight.index_select(0, index_).to(torch::kFloat32));
}

void TrainableTokenRows::Reset(const torch::Tensor& weight) {
  if (!delta.defined()) return;
  torch::NoGradGuard no_grad;
  delta.copy_(weight.index_select(0, index(weight.device())));
}

torch::Tensor TrainableTokenRows::Replaced(const torch::Tensor& weight) const {
  if (!delta.defined()) return weight;
  return weight.index_copy(0, index(weight.device()), delta.to(weight.scalar_type()));
}

void TrainableTokenRows::Merge(torch::Tensor& weight) {
  if (!delta.defined()) return;
  torch::NoGradGuard no_grad;
  weight.index_copy_(0, index(weight.device()), delta.to(weight.scalar_type()));
  delta = torch::Tensor();
  ids_.clear();
}

void LoraLayerSettings::KeepLoraSettings(const LoraOptions& o) {
  lora_r_ = o.r;
  lora_alpha_ = o.alpha;
  lora_dropout_ = o.dropout;
  lora_rslora_ = o.use_rslora;
  lora_scaling_ = LoraScaling(o.r, o.alpha, o.use_rslora);
}

double LoraScaling(int64_t r, double alpha, bool rslora) {
  return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

namespace {

// The layers of `model` that carry an adapter.
std::vector<LoraLayer*> AdaptedLayers(torch::nn::Module& model) {
  std::vector<LoraLayer*> layers;
  for (const auto& m : model.modules()) {
    auto* layer = dynamic_cast<LoraLayer*>(m.get());
    if (layer != nullptr && layer->has_lora()) layers.push_back(layer);
  }
  return layers;
}

}  // namespace

bool HasLora(torch::nn::Module& model) { return !AdaptedLayers(model).empty(); }

bool HasDora(torch::nn::Module& model) {
  const std::vector<LoraLayer*> layers = AdaptedLayers(model);
  return std::any_of(layers.begin(), layers.end(), [](LoraLayer* l) { return l->lora_dora(); });
}

absl::Status WritePeftAdapter(torch::nn::Module& model, const PeftAdapterInfo& info,
                              const std::string& dir) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::set<std::string> adapted;
  std::vector<std::pair<std::string, const LoraLayer*>> layers;
  // trainable_token_indices: a list where only the token table trains tokens (PEFT puts a list on
  // the input embeddings, which the token table is), else {full name: ids}.
  std::vector<std::string> token_entries;
  std::string token_list;
  const auto modules = model.named_modules("", false);
  for (const auto& item : modules) {
    auto* layer = dynamic_cast<LoraLayer*>(item.value().get());
    if (layer != nullptr && !layer->trainable_tokens().empty()) {
      const std::string ids =
          absl::StrCat("[", absl::StrJoin(layer->trainable_tokens(), ", "), "]");
      if (layer->is_token_table()) token_list = ids;
      token_entries.push_back(absl::StrCat("\"", item.key(), "\": ", ids));
      const torch::Tensor rows =
          item.value()->named_parameters(/*recurse=*/false)["trainable_tokens_delta"];
      tensors.emplace_back(PeftKey(adapted, item.key() + ".trainable_tokens_delta"),
                           rows.detach().to(torch::kCPU, torch::kFloat32));
    }
    if (layer == nullptr || !layer->has_lora()) continue;
    layers.emplace_back(item.key(), layer);
    adapted.insert(item.key());
    for (const auto& p : item.value()->named_parameters()) {
      if (absl::StrContains(p.key(), "lora_"))
        tensors.emplace_back(kPrefix + item.key() + "." + p.key(),
                             p.value().detach().to(torch::kCPU, torch::kFloat32));
    }
  }
  if (layers.empty()) return absl::FailedPreconditionError("the model has no LoRA adapters");
  const LoraLayer* first = layers.front().second;
  const std::vector<std::string> saved = ModulesToSave(model, info.modules_to_save);
  std::set<std::string> saved_names;
  for (const auto& p : model.named_parameters()) {
    if (Within(p.key(), saved))
      tensors.emplace_back(kPrefix + p.key(), p.value().detach().to(torch::kCPU, torch::kFloat32));
  }
  // A saved module by its last name where PEFT's suffix match finds no other module with it, else
  // by its full name.
  for (const std::string& m : saved) {
    const std::string last = LastName(m);
    const bool unique = std::all_of(modules.begin(), modules.end(), [&](const auto& item) {
      return !absl::EndsWith(item.key(), last) || item.key() == m || Within(item.key(), saved);
    });
    saved_names.insert(absl::StrCat("\"", unique ? last : m, "\""));
  }
  auto params = model.named_parameters();
  for (const std::string& b : TrainedBiases(model, info.bias, saved, adapted))
    tensors.emplace_back(PeftKey(adapted, b), params[b].detach().to(torch::kCPU, torch::kFloat32));
  // PEFT's targets: a last name where every layer of that name (outside the modules trained whole)
  // carries an adapter, else the adapted layers' full names, so that PEFT adapts the same layers.
  std::set<std::string> targets;
  for (const std::string& name : adapted) {
    const std::string last = LastName(name);
    const bool every = std::all_of(modules.begin(), modules.end(), [&](const auto& item) {
      return LastName(item.key()) != last || Within(item.key(), saved) ||
             adapted.count(item.key()) != 0;
    });
    targets.insert(every ? last : name);
  }
  // r and lora_alpha: the values most layers have (the first layer's, of equally many);
  // rank_pattern and alpha_pattern name the others,
  // by last name where every adapted layer of that name has the same value, else by full name
  // (PEFT matches either, as it matches target_modules).
  auto pattern = [&](auto value) {
    std::vector<std::pair<std::string, int>>
        count;  // in the layers' order: a tie goes to the first
    for (const auto& [name, layer] : layers) {
      const std::string v = absl::StrCat(value(*layer));
      auto it =
          std::find_if(count.begin(), count.end(), [&](const auto& c) { return c.first == v; });
      if (it == count.end()) it = count.insert(count.end(), {v, 0});
      ++it->second;
    }
    const std::string common =
        std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) {
          return a.second < b.second;
        })->first;
    std::vector<std::string> entries;
    std::set<std::string> keys;
    for (const auto& [name, layer] : layers) {
      const std::string v = absl::StrCat(value(*layer));
      if (v == common) continue;
      const std::string last = LastName(name);
      const bool alike = std::all_of(layers.begin(), layers.end(), [&](const auto& other) {
        return LastName(other.first) != last || absl::StrCat(value(*other.second)) == v;
      });
      const std::string key = alike ? last : name;
      if (keys.insert(key).second) entries.push_back(absl::StrCat("\"", key, "\": ", v));
    }
    return std::make_pair(common, absl::StrCat("{", absl::StrJoin(entries, ", "), "}"));
  };
  const std::string tokens = token_entries.empty() ? "null"
                             : token_entries.size() == 1 && !token_list.empty()
                                 ? token_list
                                 : absl::StrCat("{", absl::StrJoin(token_entries, ", "), "}");
  const auto [r, rank_pattern] = pattern([](const LoraLayer& l) { return l.lora_r(); });
  const auto [alpha, alpha_pattern] = pattern([](const LoraLayer& l) { return l.lora_alpha(); });
  KILN_RETURN_IF_ERROR(MakeDirs(dir));
  std::vector<std::string> quoted;
  for (const std::string& t : targets) quoted.push_back(absl::StrCat("\"", t, "\""));
  const std::string config = absl::StrCat(
      "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"", info.task_type, "\",\n  \"r\": ", r,
      ",\n  \"lora_alpha\": ", alpha, ",\n  \"rank_pattern\": ", rank_pattern,
      ",\n  \"alpha_pattern\": ", alpha_pattern, ",\n  \"lora_dropout\": ", first->lora_dropout(),
      ",\n  \"target_modules\": [", absl::StrJoin(quoted, ", "), "],\n  \"bias\": \"", info.bias,
      "\",\n  \"fan_in_fan_out\": ", info.fan_in_fan_out ? "true" : "false",
      ",\n  \"use_rslora\": ", first->lora_rslora() ? "true" : "false",
      ",\n  \"use_dora\": ", first->lora_dora() ? "true" : "false",
      ",\n  \"lora_bias\": ", first->lora_has_bias() ? "true" : "false",
      ",\n  \"trainable_token_indices\": ", tokens,
      ",\n  \"init_lora_weights\": true,\n"
      "  \"inference_mode\": true,\n  \"modules_to_save\": ",
      saved_names.empty() ? "null" : absl::StrCat("[", absl::StrJoin(saved_names, ", "), "]"),
      ",\n  \"base_model_name_or_path\": \"",
      absl::StrReplaceAll(info.base_model, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"\n}\n");
  KILN_RETURN_IF_ERROR(WriteFileAtomically(dir + "/adapter_config.json", config));
  return WriteSafetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
}

void StartAdaptersFromBase(torch::nn::Module& model) {
  for (const auto& m : model.modules()) {
    auto* layer = dynamic_cast<LoraLayer*>(m.get());
    if (layer == nullptr) continue;
    if (layer->has_lora()) layer->ResetDoraMagnitude();  // DoRA's only
    layer->ResetTrainableTokens();
  }
}

void MergeLora(torch::nn::Module& model) {
  for (const auto& m : model.modules()) {
    auto* layer = dynamic_cast<LoraLayer*>(m.get());
    if (layer != nullptr && (layer->has_lora() || !layer->trainable_tokens().empty()))
      layer->MergeLora();
  }
}

}  // namespace kiln
