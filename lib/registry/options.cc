#include "lib/registry/options.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/config/override.h"
#include "lib/config/secrets.h"
#include "lib/config/suggest.h"
#include "lib/config/yaml_io.h"

namespace kiln {

using config::Node;
using config::NodeKind;
using config::NodePtr;

const char* OptionTypeName(OptionType type) {
  switch (type) {
    case OptionType::kBool: return "bool";
    case OptionType::kInt: return "int";
    case OptionType::kFloat: return "float";
    case OptionType::kString: return "string";
    case OptionType::kList: return "list";
    case OptionType::kMap: return "mapping";
    case OptionType::kAny: return "any";
  }
  return "?";
}

void RegisterSecretOptions(const std::string& key, const OptionSchema& schema) {
  for (const auto& spec : schema.options()) {
    if (spec.secret) config::RegisterSecretKey(key.empty() ? spec.name : key + "." + spec.name);
  }
}

OptionSchema& OptionSchema::Push(OptionSpec spec) {
  for (auto& existing : options_) {
    if (existing.name == spec.name) {
      existing = std::move(spec);
      return *this;
    }
  }
  options_.push_back(std::move(spec));
  return *this;
}

OptionSchema& OptionSchema::Required(std::string name, OptionType type, std::string doc) {
  return Push({std::move(name), type, nullptr, std::move(doc), false});
}
OptionSchema& OptionSchema::Bool(std::string name, bool value, std::string doc) {
  return Push({std::move(name), OptionType::kBool, Node::Bool(value), std::move(doc), false});
}
OptionSchema& OptionSchema::Int(std::string name, int64_t value, std::string doc) {
  return Push({std::move(name), OptionType::kInt, Node::Int(value), std::move(doc), false});
}
OptionSchema& OptionSchema::Float(std::string name, double value, std::string doc) {
  return Push({std::move(name), OptionType::kFloat, Node::Float(value), std::move(doc), false});
}
OptionSchema& OptionSchema::String(std::string name, std::string value, std::string doc) {
  return Push({std::move(name), OptionType::kString, Node::String(std::move(value)), std::move(doc),
               false});
}
OptionSpec OptionSpecFromText(std::string name, OptionType type, const std::string& default_text,
                              std::string doc) {
  auto parsed = config::ParseOverrideValue(default_text);
  OptionSpec spec;
  spec.name = std::move(name);
  spec.type = type;
  spec.default_value = parsed.ok() ? parsed->node : Node::String(default_text);
  spec.doc = std::move(doc);
  spec.nullable = spec.default_value->is_null();
  return spec;
}

OptionType EnumOptionType(const std::vector<std::string>& names) {
  for (const auto& name : names) {
    auto parsed = config::ParseOverrideValue(name);
    if (parsed.ok() && parsed->node->kind() != config::NodeKind::kString) return OptionType::kAny;
  }
  return OptionType::kString;
}

OptionSchema& OptionSchema::Add(std::string name, OptionType type, const std::string& default_text,
                                std::string doc) {
  return Push(OptionSpecFromText(std::move(name), type, default_text, std::move(doc)));
}

const OptionSpec* OptionSchema::Find(const std::string& name) const {
  for (const auto& o : options_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

namespace {

bool Matches(OptionType type, const Node& value) {
  switch (type) {
    case OptionType::kBool: return value.kind() == NodeKind::kBool;
    case OptionType::kInt: return value.kind() == NodeKind::kInt;
    case OptionType::kFloat:
      return value.kind() == NodeKind::kFloat || value.kind() == NodeKind::kInt;
    case OptionType::kString: return value.kind() == NodeKind::kString;
    case OptionType::kList: return value.is_list();
    case OptionType::kMap: return value.is_map();
    case OptionType::kAny: return true;
  }
  return false;
}

std::string Where(const Node& node) {
  std::string w = node.source().Describe();
  return w.empty() ? "" : " (set at " + w + ")";
}

}  // namespace

absl::Status OptionValueError(const std::string& key, const std::string& component,
                              const std::string& what, const Node& value) {
  return absl::InvalidArgumentError(absl::StrCat("option '", key, "' of ", component, " must be ",
                                                 what, ", got ", config::ScalarToYaml(value),
                                                 Where(value)));
}

absl::Status OptionContext::Refuse(const std::string& name, const std::string& what) const {
  auto value = options_.Get<NodePtr>(name);
  return OptionValueError(options_.FullKey(name), component_, what,
                          value.ok() ? **value : *Node::Null());
}

absl::StatusOr<NodePtr> OptionSchema::Apply(const Node& node, const std::string& key,
                                            const std::string& component) const {
  if (!node.is_map()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' must be a mapping of options for ", component, Where(node)));
  }
  auto full = [&](const std::string& name) { return key.empty() ? name : key + "." + name; };
  std::vector<std::string> names;
  for (const auto& o : options_) names.push_back(o.name);
  NodePtr out = Node::Map();
  out->set_source(node.source());
  for (const auto& [name, value] : node.entries()) {
    if (!name.empty() && name[0] == '_') {
      out->Set(name, value);
      continue;
    }
    const OptionSpec* spec = Find(name);
    if (spec == nullptr) {
      std::string known =
          names.empty() ? "it takes no options" : "known: " + absl::StrJoin(names, ", ");
      // A typed key (`on:` is the bool key True, `1:` the int key 1, as in Hydra) is shown as
      // Python shows it.
      const std::string text = config::KeyText(name);
      return absl::InvalidArgumentError(absl::StrCat("unknown option '", full(text), "' for ",
                                                     component, config::DidYouMean(text, names),
                                                     Where(*value), "; ", known));
    }
    if (value->is_missing()) {
      return absl::InvalidArgumentError(absl::StrCat("missing mandatory value '", full(name), "'",
                                                     Where(*value), "; set it, e.g. ", full(name),
                                                     "=VALUE"));
    }
    if (spec->type == OptionType::kInt && value->is_big_int()) {
      return absl::InvalidArgumentError(absl::StrCat("option '", full(name), "' of ", component,
                                                     " must be an integer within 64 bits, got ",
                                                     value->int_text(), Where(*value)));
    }
    bool null_ok = value->is_null() && (spec->nullable || spec->type == OptionType::kAny);
    if (!null_ok && !Matches(spec->type, *value)) {
      return absl::InvalidArgumentError(absl::StrCat("option '", full(name), "' of ", component,
                                                     " must be ", OptionTypeName(spec->type),
                                                     ", got ", config::KindName(value->kind()), " ",
                                                     config::ScalarToYaml(*value), Where(*value)));
    }
    if (spec->check && !(value->is_null() && spec->nullable) && !spec->check.accepts(*value)) {
      return OptionValueError(full(name), component, spec->check.what, *value);
    }
    if (spec->item_check && value->is_list()) {
      for (size_t i = 0; i < value->items().size(); ++i) {
        const Node& item = *value->items()[i];
        if (!spec->item_check.accepts(item)) {
          return OptionValueError(full(name) + "." + std::to_string(i), component,
                                  spec->item_check.what, item);
        }
      }
    }
    NodePtr stored = value;
    if (spec->type == OptionType::kFloat && value->kind() == NodeKind::kInt) {
      stored = Node::Float(config::NumberValue(*value));
      stored->set_source(value->source());
    }
    out->Set(name, stored);
  }
  for (const auto& spec : options_) {
    if (out->Contains(spec.name)) continue;
    if (spec.default_value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("option '", full(spec.name), "' of ",
                                                     component, " is required (", spec.doc, ")",
                                                     Where(node)));
    }
    out->Set(spec.name, spec.default_value->Clone());
  }
  return out;
}

Options& Options::Put(const std::string& key, NodePtr value) {
  node_->Set(key, std::move(value));
  return *this;
}

Options& Options::Set(const std::string& key, std::initializer_list<int64_t> values) {
  return Set(key, std::vector<int64_t>(values));
}

Options& Options::Set(const std::string& key, const std::vector<int64_t>& values) {
  NodePtr list = Node::List();
  for (int64_t v : values) list->Append(Node::Int(v));
  return Put(key, list);
}

Options& Options::Set(const std::string& key, const std::vector<double>& values) {
  NodePtr list = Node::List();
  for (double v : values) list->Append(Node::Float(v));
  return Put(key, list);
}

Options& Options::Set(const std::string& key, const std::vector<std::string>& values) {
  NodePtr list = Node::List();
  for (const auto& v : values) list->Append(Node::String(v));
  return Put(key, list);
}

Options& Options::Set(const std::string& key, const Options& nested) {
  return Put(key, nested.node_->Clone());
}

Options& Options::Set(const std::string& key, const std::vector<Options>& list) {
  NodePtr items = Node::List();
  for (const auto& o : list) items->Append(o.node_->Clone());
  return Put(key, items);
}

namespace {

bool IsNumber(const Node& n) { return n.kind() == NodeKind::kInt || n.kind() == NodeKind::kFloat; }
std::string FormatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrCat(v);
}

}  // namespace

OptionCheck OneOf(std::vector<std::string> values) {
  std::string what = "one of: " + absl::StrJoin(values, ", ");
  return {what, [values = std::move(values)](const Node& n) {
            return n.kind() == NodeKind::kString &&
                   std::find(values.begin(), values.end(), n.as_string()) != values.end();
          }};
}

OptionCheck InRange(double low, double high) {
  return {absl::StrCat("in [", FormatNumber(low), ", ", FormatNumber(high), "]"),
          [low, high](const Node& n) {
            return IsNumber(n) && config::NumberValue(n) >= low && config::NumberValue(n) <= high;
          }};
}

OptionCheck InHalfOpenRange(double low, double high) {
  return {absl::StrCat("in [", FormatNumber(low), ", ", FormatNumber(high), ")"),
          [low, high](const Node& n) {
            return IsNumber(n) && config::NumberValue(n) >= low && config::NumberValue(n) < high;
          }};
}

OptionCheck AtLeast(double low) {
  return {absl::StrCat("at least ", FormatNumber(low)),
          [low](const Node& n) { return IsNumber(n) && config::NumberValue(n) >= low; }};
}

OptionCheck GreaterThan(double low) {
  return {absl::StrCat("greater than ", FormatNumber(low)),
          [low](const Node& n) { return IsNumber(n) && config::NumberValue(n) > low; }};
}

OptionCheck NonEmpty() {
  return {"non-empty", [](const Node& n) {
            if (n.kind() == NodeKind::kString) return !n.as_string().empty();
            if (n.is_list()) return !n.items().empty();
            if (n.is_map()) return !n.entries().empty();
            return true;
          }};
}

OptionCheck FileExists() {
  return {"the path of an existing file", [](const Node& n) {
            struct stat st;
            return n.kind() == NodeKind::kString && ::stat(n.as_string().c_str(), &st) == 0 &&
                   S_ISREG(st.st_mode);
          }};
}

OptionCheck Each(OptionCheck item) {
  item.each = true;
  return item;
}

namespace internal {

template <typename T>
bool NumberList<T>::Accepts(const Node& n, size_t size) {
  if (!n.is_list() || (size > 0 && n.items().size() != size)) return false;
  for (const auto& item : n.items()) {
    if (!(item->kind() == NodeKind::kInt ||
          (std::is_same_v<T, double> && item->kind() == NodeKind::kFloat))) {
      return false;
    }
  }
  return true;
}

template <typename T>
std::vector<T> NumberList<T>::Items(const Node& n) {
  std::vector<T> out;
  for (const auto& item : n.items()) {
    if constexpr (std::is_same_v<T, double>) {
      out.push_back(config::NumberValue(*item));
    } else {
      out.push_back(item->as_int());
    }
  }
  return out;
}

template <typename T>
NodePtr NumberList<T>::ToNode(const std::vector<T>& v) {
  NodePtr list = Node::List();
  for (T item : v) {
    list->Append(std::is_same_v<T, double> ? Node::Float(static_cast<double>(item))
                                           : Node::Int(static_cast<int64_t>(item)));
  }
  return list;
}

template struct NumberList<int64_t>;
template struct NumberList<double>;

NodePtr OptionField<std::vector<std::string>>::ToNode(const std::vector<std::string>& v) {
  NodePtr list = Node::List();
  for (const auto& item : v) list->Append(Node::String(item));
  return list;
}

std::vector<std::string> OptionField<std::vector<std::string>>::From(const Node& n) {
  std::vector<std::string> out;
  for (const auto& item : n.items()) out.push_back(item->as_string());
  return out;
}

bool OptionField<std::vector<std::string>>::Accepts(const Node& n) {
  if (!n.is_list()) return false;
  for (const auto& item : n.items()) {
    if (item->kind() != NodeKind::kString) return false;
  }
  return true;
}

}  // namespace internal

}  // namespace kiln
