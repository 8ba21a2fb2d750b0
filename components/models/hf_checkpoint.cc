#include "components/models/hf_checkpoint.h"

#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"
#include "lib/weights/safetensors.h"
#include "nlohmann/json.hpp"

namespace kiln {
namespace {

std::string Describe(const config::Node& node) {
  switch (node.kind()) {
    case config::NodeKind::kNull: return "null";
    case config::NodeKind::kBool: return node.as_bool() ? "true" : "false";
    case config::NodeKind::kInt: return node.int_text();
    case config::NodeKind::kFloat: return absl::StrCat(node.as_float());
    // As JSON writes it: a newline or a quote inside stays one escaped character, so that the
    // message is one line (bytes that are no UTF-8 become U+FFFD).
    case config::NodeKind::kString:
      return nlohmann::json(node.as_string())
          .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
    default: return node.is_map() ? "a mapping" : "a list";
  }
}

}  // namespace

absl::StatusOr<HfConfig> HfConfig::Read(const std::string& dir) {
  HfConfig c;
  c.path_ = dir + "/config.json";
  if (!IsRegularFile(c.path_)) {
    return absl::NotFoundError(absl::StrCat(
        dir, " holds no config.json: a pretrained model is a folder that save_pretrained wrote"));
  }
  // JSON is YAML's flow style; kiln's YAML reader gives each line's position for messages.
  KILN_ASSIGN_OR_RETURN(c.root_, config::LoadYamlFile(c.path_));
  if (c.root_ == nullptr || !c.root_->is_map())
    return absl::InvalidArgumentError(absl::StrCat(c.path_, ": not a JSON object"));
  c.model_type_ = c.String("model_type", "");
  if (c.model_type_.empty())
    return absl::InvalidArgumentError(absl::StrCat(c.path_, ": no model_type"));
  return c;
}

absl::StatusOr<std::optional<double>> HfConfig::OptionalFloat(const std::string& key) const {
  config::NodePtr node = root_->Find(key);
  if (node == nullptr || node->is_null()) return std::optional<double>();
  double value = 0;
  switch (node->kind()) {
    case config::NodeKind::kInt: return static_cast<double>(node->as_int());
    case config::NodeKind::kFloat: return node->as_float();
    case config::NodeKind::kString:
      // YAML 1.1 reads JSON's 1e-05 (no dot) as a string.
      if (absl::SimpleAtod(node->as_string(), &value) && std::isfinite(value)) return value;
      break;
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Where(key), " is ", Describe(*node), ", not a number"));
}

absl::StatusOr<std::optional<int64_t>> HfConfig::OptionalInt(const std::string& key) const {
  config::NodePtr node = root_->Find(key);
  if (node == nullptr || node->is_null()) return std::optional<int64_t>();
  if (node->kind() == config::NodeKind::kInt && !node->is_big_int()) return node->as_int();
  return absl::InvalidArgumentError(
      absl::StrCat(Where(key), " is ", Describe(*node), ", not an integer"));
}

absl::StatusOr<int64_t> HfConfig::Int(const std::string& key) const {
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInt(key));
  if (!value) return absl::InvalidArgumentError(absl::StrCat(path_, ": no ", prefix_, key));
  return *value;
}

absl::StatusOr<double> HfConfig::Float(const std::string& key) const {
  KILN_ASSIGN_OR_RETURN(std::optional<double> value, OptionalFloat(key));
  if (!value) return absl::InvalidArgumentError(absl::StrCat(path_, ": no ", prefix_, key));
  return *value;
}

bool HfConfig::Bool(const std::string& key, bool fallback) const {
  config::NodePtr node = root_->Find(key);
  return node != nullptr && node->kind() == config::NodeKind::kBool ? node->as_bool() : fallback;
}

std::string HfConfig::String(const std::string& key, const std::string& fallback) const {
  config::NodePtr node = root_->Find(key);
  return node != nullptr && node->kind() == config::NodeKind::kString ? node->as_string()
                                                                      : fallback;
}

absl::Status HfConfig::Refuse(const std::string& key, const std::string& what) const {
  config::NodePtr node = root_->Find(key);
  return absl::InvalidArgumentError(
      absl::StrCat(Where(key), " is ", node == nullptr ? "not set" : Describe(*node), "; ", what));
}

namespace {

const std::map<std::string, std::string>& ModelsByType() {
  static const auto* models = new std::map<std::string, std::string>{
      {"bert", "bert"},     {"gpt2", "gpt2"},   {"llama", "llama"},
      {"mistral", "llama"}, {"qwen2", "llama"}, {"qwen3", "llama"},
      {"roberta", "bert"},  {"vit", "hf_vit"},  {"xlm-roberta", "bert"}};
  return *models;
}

}  // namespace

std::string KilnModelFor(const std::string& model_type) {
  auto it = ModelsByType().find(model_type);
  return it == ModelsByType().end() ? std::string() : it->second;
}

std::vector<std::string> KilnModelTypes() {
  std::vector<std::string> types;
  for (const auto& [type, model] : ModelsByType()) types.push_back(type);
  return types;
}

absl::Status HfConfig::RefuseModelType(const std::string& what) const {
  const std::string model = KilnModelFor(model_type_);
  return Refuse("model_type", model.empty()
                                  ? absl::StrCat(what, "; kiln reads the model_types ",
                                                 absl::StrJoin(KilnModelTypes(), ", "))
                                  : absl::StrCat(what, "; model=", model, " reads this folder"));
}

absl::StatusOr<std::vector<std::string>> HfConfig::Labels(int64_t fallback) const {
  KILN_ASSIGN_OR_RETURN(auto id2label, StringPairs("id2label"));
  std::vector<std::string> labels;
  if (!id2label.empty()) {
    labels.assign(id2label.size(), "");
    for (const auto& [id, label] : id2label) {
      size_t index = 0;
      if (!absl::SimpleAtoi(id, &index) || index >= id2label.size() || !labels[index].empty())
        return Refuse("id2label", "its keys must be the ids 0 .. num_labels - 1, once each");
      labels[index] = label;
    }
  } else {
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> n, OptionalInt("num_labels"));
    for (int64_t i = 0; i < n.value_or(fallback); ++i) labels.push_back(absl::StrCat("LABEL_", i));
  }
  if (labels.empty()) return Refuse("id2label", "a classifier needs at least one label");
  return labels;
}

absl::StatusOr<std::optional<HfConfig>> HfConfig::Object(const std::string& key) const {
  config::NodePtr node = root_->Find(key);
  if (node == nullptr || node->is_null()) return std::optional<HfConfig>();
  if (!node->is_map())
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), " is ", Describe(*node), ", not an object"));
  HfConfig inner = *this;
  inner.root_ = node;
  inner.prefix_ = prefix_ + key + ".";
  return std::optional<HfConfig>(std::move(inner));
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> HfConfig::StringPairs(
    const std::string& key) const {
  config::NodePtr node = root_->Find(key);
  std::vector<std::pair<std::string, std::string>> pairs;
  if (node == nullptr || node->is_null()) return pairs;
  if (!node->is_map())
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), " is ", Describe(*node), ", not an object"));
  for (const auto& [name, value] : node->entries()) {
    if (value->kind() != config::NodeKind::kString)
      return absl::InvalidArgumentError(
          absl::StrCat(Where(key + "." + name), " is ", Describe(*value), ", not a string"));
    pairs.emplace_back(name, value->as_string());
  }
  return pairs;
}

absl::StatusOr<std::vector<std::string>> HfConfig::Strings(const std::string& key) const {
  config::NodePtr node = root_->Find(key);
  std::vector<std::string> strings;
  if (node == nullptr || node->is_null()) return strings;
  if (node->is_list()) {
    for (const config::NodePtr& item : node->items()) {
      if (item->kind() != config::NodeKind::kString) break;
      strings.push_back(item->as_string());
    }
    if (strings.size() == node->items().size()) return strings;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Where(key), " is ", Describe(*node), ", not a list of strings"));
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadHfWeights(const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  if (IsRegularFile(single)) return ReadSafetensors(single);
  const std::string index = dir + "/model.safetensors.index.json";
  if (!IsRegularFile(index)) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds neither model.safetensors nor model.safetensors.index.json (kiln reads "
        "safetensors weights, not pytorch_model.bin: save_pretrained writes them by default)"));
  }
  KILN_ASSIGN_OR_RETURN(config::NodePtr root, config::LoadYamlFile(index));
  config::NodePtr map = root && root->is_map() ? root->Find("weight_map") : nullptr;
  if (map == nullptr || !map->is_map())
    return absl::InvalidArgumentError(absl::StrCat(index, ": no weight_map object"));
  std::set<std::string> shards;
  for (const auto& [name, file] : map->entries()) {
    if (file->kind() != config::NodeKind::kString ||
        file->as_string().find('/') != std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": weight_map.", name, " is not a file name in the folder"));
    shards.insert(file->as_string());
  }
  std::map<std::string, torch::Tensor> all;
  for (const std::string& shard : shards) {
    KILN_ASSIGN_OR_RETURN(auto tensors, ReadSafetensors(dir + "/" + shard));
    for (auto& [name, tensor] : tensors) all[name] = std::move(tensor);
  }
  for (const auto& [name, file] : map->entries()) {
    if (all.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": ", name, " is not in ", file->as_string()));
    }
  }
  return all;
}

absl::Status LoadHfState(const std::map<std::string, torch::Tensor>& state,
                         torch::nn::Module& model, const std::string& dir,
                         const std::string& summary) {
  WeightLoadSpec spec;
  spec.path = dir;
  spec.option = "model.pretrained";
  KILN_ASSIGN_OR_RETURN(WeightLoadReport report, LoadPretrainedWeights(state, model, spec));
  Logger::Instance().Info(absl::StrCat("model.pretrained ", dir, ": ", summary, "; ",
                                       report.Count("loaded"), " loaded, ", report.Count("missing"),
                                       " missing, ", report.Count("unused"), " unused"));
  if (report.Count("unused") > 0) Logger::Instance().Info(report.Table());
  return absl::OkStatus();
}

absl::Status CheckSizesBesideFolder(const std::vector<SizeBesideFolder>& sizes,
                                    const std::string& dir, const OptionContext& context) {
  for (const SizeBesideFolder& s : sizes) {
    if (s.value && *s.value != s.in_file) {
      return context.Refuse(s.option, absl::StrCat(s.in_file, " as ", dir, "/config.json's ",
                                                   s.hf_key, " says (or leave it unset)"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, torch::Tensor>> HfTensors(
    torch::nn::Module& module, const std::vector<std::string>& prefixes) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (auto& [name, tensor] : StateDict(module)) {
    for (const std::string& prefix : prefixes) {
      if (absl::StartsWith(name, prefix)) {
        tensors.emplace_back(name, tensor.detach().to(torch::kCPU, torch::kFloat32));
        break;
      }
    }
  }
  return tensors;
}

void SetHfLabels(const std::vector<std::string>& labels, nlohmann::ordered_json& config) {
  nlohmann::ordered_json id2label, label2id;
  for (size_t i = 0; i < labels.size(); ++i) {
    id2label[std::to_string(i)] = labels[i];
    label2id[labels[i]] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
  config["problem_type"] = "single_label_classification";
}

}  // namespace kiln
