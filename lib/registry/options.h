// A component's options, declared once next to its code: name, type, default, one-line doc.
// The declaration validates config nodes (unknown key -> "did you mean", wrong type -> file:line),
// fills defaults, and drives `kiln list` and docs/components.md.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/config/node.h"

namespace kiln {

enum class OptionType { kBool, kInt, kFloat, kString, kList, kMap, kAny };
const char* OptionTypeName(OptionType type);

// A constraint on an option's value beyond its type: `OneOf({"max", "min"})`, `InRange(0, 1)`,
// `AtLeast(1)`, `GreaterThan(0)`, `NonEmpty()`, `FileExists()`. A value that fails it is
// refused, like a wrong type, with "option 'KEY' of COMPONENT must be WHAT, got VALUE (set at ...)".
struct OptionCheck {
  std::string what;                                   // "one of: max, min", "in [0, 1]"
  std::function<bool(const config::Node&)> accepts;  // never sees null
  explicit operator bool() const { return static_cast<bool>(accepts); }
};
OptionCheck OneOf(std::vector<std::string> values);
OptionCheck InRange(double low, double high);  // low <= value <= high
OptionCheck InHalfOpenRange(double low, double high);  // low <= value < high
OptionCheck AtLeast(double low);
OptionCheck GreaterThan(double low);
OptionCheck NonEmpty();    // a string or list with something in it
OptionCheck FileExists();  // a string naming a regular file

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::kAny;
  config::NodePtr default_value;  // nullptr: the option is required
  std::string doc;
  bool nullable = false;          // null is an accepted value
  OptionCheck check;              // empty: any value of the type
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
  // The whole declaration at once (OptionBinding uses it).
  OptionSchema& Add(OptionSpec spec) { return Push(std::move(spec)); }

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

namespace internal {
// How a C++ field type maps to an option: its OptionType, its default as a node, and reading
// it back from a validated node.
template <typename F>
struct OptionField;
template <>
struct OptionField<bool> {
  static constexpr OptionType kType = OptionType::kBool;
  static config::NodePtr ToNode(bool v) { return config::Node::Bool(v); }
  static bool From(const config::Node& n) { return n.as_bool(); }
};
template <typename I>
struct IntegerField {
  static constexpr OptionType kType = OptionType::kInt;
  static config::NodePtr ToNode(I v) { return config::Node::Int(static_cast<int64_t>(v)); }
  static I From(const config::Node& n) { return static_cast<I>(n.as_int()); }
};
template <>
struct OptionField<int64_t> : IntegerField<int64_t> {};
template <>
struct OptionField<int> : IntegerField<int> {};
template <>
struct OptionField<double> {
  static constexpr OptionType kType = OptionType::kFloat;
  static config::NodePtr ToNode(double v) { return config::Node::Float(v); }
  static double From(const config::Node& n) { return n.as_float(); }
};
template <>
struct OptionField<std::string> {
  static constexpr OptionType kType = OptionType::kString;
  static config::NodePtr ToNode(const std::string& v) { return config::Node::String(v); }
  static std::string From(const config::Node& n) { return n.as_string(); }
};
template <>
struct OptionField<std::vector<std::string>> {
  static constexpr OptionType kType = OptionType::kList;
  static config::NodePtr ToNode(const std::vector<std::string>& v);
  static std::vector<std::string> From(const config::Node& n);  // items must be strings (checked)
  static bool Accepts(const config::Node& n);
  static constexpr const char* kWhat = "a list of strings";
};
template <>
struct OptionField<config::NodePtr> {
  static constexpr OptionType kType = OptionType::kAny;
  static config::NodePtr ToNode(const config::NodePtr& v) { return v ? v : config::Node::Null(); }
  static config::NodePtr From(const config::Node& n) { return n.Clone(); }
};
template <typename T>
struct OptionField<std::optional<T>> {
  static constexpr OptionType kType = OptionField<T>::kType;
  static config::NodePtr ToNode(const std::optional<T>& v) {
    return v.has_value() ? OptionField<T>::ToNode(*v) : config::Node::Null();
  }
  static std::optional<T> From(const config::Node& n) {
    if (n.is_null()) return std::nullopt;
    return OptionField<T>::From(n);
  }
};
template <typename F, typename = void>
struct HasAccepts : std::false_type {};
template <typename F>
struct HasAccepts<F, std::void_t<decltype(OptionField<F>::Accepts(std::declval<const config::Node&>()))>>
    : std::true_type {};
template <typename F>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {
  using Inner = T;
};
}  // namespace internal

// A component's options bound to the fields of its options struct, each declared once: name,
// type (from the field), default, doc and check. The registry validates a config node against
// the declaration, fills the struct and hands it to the factory, which reads nothing by string:
//
//   struct LocalOptions { int64_t n_jobs = -1; };
//   OptionBinding<LocalOptions>().Field("n_jobs", &LocalOptions::n_jobs, "jobs at once", AtLeast(-1));
//
// The field's initial value in a default-constructed S is the option's default; a
// std::optional field defaults to null and accepts null.
template <typename S>
class OptionBinding {
 public:
  template <typename F>
  OptionBinding& Field(std::string name, F S::*field, std::string doc, OptionCheck check = {}) {
    return Bind(Declare(std::move(name), field, std::move(doc), std::move(check)), field);
  }
  // An option without a default: the config must set it.
  template <typename F>
  OptionBinding& Required(std::string name, F S::*field, std::string doc, OptionCheck check = {}) {
    OptionSpec spec = Declare(std::move(name), field, std::move(doc), std::move(check));
    spec.default_value = nullptr;
    return Bind(std::move(spec), field);
  }
  // A config node kept as it is (a mapping, a list of anything), of the declared type; null by
  // default and accepted.
  OptionBinding& Node(std::string name, config::NodePtr S::*field, OptionType type, std::string doc,
                      OptionCheck check = {}) {
    OptionSpec spec = Declare(std::move(name), field, std::move(doc), std::move(check));
    spec.type = type;
    return Bind(std::move(spec), field);
  }

  // The declaration (what `kiln list` and docs/components.md show).
  const OptionSchema& schema() const { return schema_; }
  // The struct from options that the schema has validated and completed.
  S Fill(const config::Node& options) const {
    S out;
    for (const auto& set : setters_) set(options, out);
    return out;
  }

 private:
  // The option's declaration, from the field's type and its value in a default-constructed S.
  template <typename F>
  static OptionSpec Declare(std::string name, F S::*field, std::string doc, OptionCheck check) {
    using Traits = internal::OptionField<F>;
    OptionSpec spec;
    spec.name = std::move(name);
    spec.type = Traits::kType;
    spec.default_value = Traits::ToNode(S().*field);
    spec.doc = std::move(doc);
    spec.nullable = internal::IsOptional<F>::value || spec.default_value->is_null();
    spec.check = std::move(check);
    if constexpr (internal::HasAccepts<F>::value) {
      OptionCheck typed{Traits::kWhat, &Traits::Accepts};
      if (spec.check) {
        OptionCheck extra = spec.check;
        spec.check = {typed.what + " (" + extra.what + ")",
                      [typed, extra](const config::Node& n) { return typed.accepts(n) && extra.accepts(n); }};
      } else {
        spec.check = typed;
      }
    }
    return spec;
  }
  template <typename F>
  OptionBinding& Bind(OptionSpec spec, F S::*field) {
    setters_.push_back([name = spec.name, field](const config::Node& options, S& out) {
      out.*field = internal::OptionField<F>::From(*options.Find(name));
    });
    schema_.Add(std::move(spec));
    return *this;
  }

  OptionSchema schema_;
  std::vector<std::function<void(const config::Node&, S&)>> setters_;
};

}  // namespace kiln
