// A component's options, declared once next to its code: name, type, default, one-line doc.
// The declaration validates config nodes (unknown key -> "did you mean", wrong type -> file:line),
// fills defaults, and drives `kiln list` and docs/components.md.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/config/node.h"

namespace kiln {

enum class OptionType { kBool, kInt, kFloat, kString, kList, kMap, kAny };
const char* OptionTypeName(OptionType type);

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::kAny;
  config::NodePtr default_value;  // nullptr: the option is required
  std::string doc;
  bool nullable = false;          // null is an accepted value
};

class OptionSchema {
 public:
  OptionSchema& Required(std::string name, OptionType type, std::string doc);
  OptionSchema& Bool(std::string name, bool value, std::string doc);
  OptionSchema& Int(std::string name, int64_t value, std::string doc);
  OptionSchema& Float(std::string name, double value, std::string doc);
  OptionSchema& String(std::string name, std::string value, std::string doc);
  // A default given as YAML/override text ("[32, 64]", "null", "{a: 1}"); null makes it nullable.
  OptionSchema& Add(std::string name, OptionType type, const std::string& default_text, std::string doc);

  const std::vector<OptionSpec>& options() const { return options_; }
  const OptionSpec* Find(const std::string& name) const;

  // Checks `node` (a mapping, keys starting with '_' ignored) against the declaration and
  // returns a copy with defaults filled in. `key` names the node in messages ("model").
  absl::StatusOr<config::NodePtr> Apply(const config::Node& node, const std::string& key,
                                        const std::string& component) const;

 private:
  OptionSchema& Push(OptionSpec spec);
  std::vector<OptionSpec> options_;
};

// A component's options written in C++ instead of YAML, for library use:
//   auto model = Registry<Model>::Get().Instantiate(
//       "mlp", Options().Set("in_features", 784).Set("hidden", {256, 128}).Set("num_classes", 10));
// The same declaration validates them (unknown key, wrong type) and fills defaults.
class Options {
 public:
  Options() : node_(config::Node::Map()) {}
  Options& Set(const std::string& key, bool value) { return Put(key, config::Node::Bool(value)); }
  Options& Set(const std::string& key, int value) { return Put(key, config::Node::Int(value)); }
  Options& Set(const std::string& key, int64_t value) { return Put(key, config::Node::Int(value)); }
  Options& Set(const std::string& key, double value) { return Put(key, config::Node::Float(value)); }
  Options& Set(const std::string& key, const char* value) { return Put(key, config::Node::String(value)); }
  Options& Set(const std::string& key, const std::string& value) { return Put(key, config::Node::String(value)); }
  Options& Set(const std::string& key, std::initializer_list<int64_t> values);
  Options& Set(const std::string& key, const std::vector<int64_t>& values);
  Options& Set(const std::string& key, const std::vector<double>& values);
  Options& Set(const std::string& key, const std::vector<std::string>& values);
  Options& Set(const std::string& key, const Options& nested);
  Options& Set(const std::string& key, const std::vector<Options>& list);

  // The options as a config node (for Registry<T>::Instantiate and TrainerOptions::FromConfig).
  config::Config config() const { return config::Config(node_); }
  const config::NodePtr& node() const { return node_; }

 private:
  Options& Put(const std::string& key, config::NodePtr value);
  config::NodePtr node_;
};

}  // namespace kiln
