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
// `AtLeast(1)`, `GreaterThan(0)`, `NonEmpty()`, `FileExists()`, `Each(AtLeast(0))`. A value that
// fails it is refused, like a wrong type, with OptionValueError's one message.
struct OptionCheck {
  std::string what;  // "one of: max, min", "in [0, 1]"
  // Sees null only where null is not an accepted value (a non-nullable option of type any).
  std::function<bool(const config::Node&)> accepts;
  bool each = false;  // asked of every item of a list; a failing item is named KEY.N (Each)
  explicit operator bool() const { return static_cast<bool>(accepts); }
};
OptionCheck OneOf(std::vector<std::string> values);
OptionCheck InRange(double low, double high);          // low <= value <= high
OptionCheck InHalfOpenRange(double low, double high);  // low <= value < high
OptionCheck AtLeast(double low);
OptionCheck GreaterThan(double low);
OptionCheck NonEmpty();              // a string or list with something in it
OptionCheck FileExists();            // a string naming a regular file
OptionCheck Each(OptionCheck item);  // every item of a list passes `item`

// The one message for an option whose value is refused: "option 'KEY' of COMPONENT must be WHAT,
// got VALUE (set at FILE:LINE)". `key` is the full key ("optimizer.lr"), `component` e.g.
// "optimizer 'sgd'".
absl::Status OptionValueError(const std::string& key, const std::string& component,
                              const std::string& what, const config::Node& value);

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::kAny;
  config::NodePtr default_value;  // nullptr: the option is required
  std::string doc;
  bool nullable = false;   // null is an accepted value
  OptionCheck check;       // empty: any value of the type
  OptionCheck item_check;  // asked of each item of a list value (Each); empty: none
  bool secret = false;     // a credential: *** wherever kiln stores or prints a config
};
// A declaration whose default is given as override text ("1.0", "null", "[32, 64]"); a null
// default makes null an accepted value.
OptionSpec OptionSpecFromText(std::string name, OptionType type, const std::string& default_text,
                              std::string doc);
// The type of an enum option with these names: string, or any when a name reads as another
// scalar (precision's "32").
OptionType EnumOptionType(const std::vector<std::string>& names);

class OptionSchema {
 public:
  OptionSchema& Required(std::string name, OptionType type, std::string doc);
  OptionSchema& Bool(std::string name, bool value, std::string doc);
  OptionSchema& Int(std::string name, int64_t value, std::string doc);
  OptionSchema& Float(std::string name, double value, std::string doc);
  OptionSchema& String(std::string name, std::string value, std::string doc);
  // A default given as YAML/override text ("[32, 64]", "null", "{a: 1}"); null makes it nullable.
  OptionSchema& Add(std::string name, OptionType type, const std::string& default_text,
                    std::string doc);
  // The whole declaration at once (OptionBinding uses it).
  OptionSchema& Add(OptionSpec spec) { return Push(std::move(spec)); }

  const std::vector<OptionSpec>& options() const { return options_; }
  const OptionSpec* Find(const std::string& name) const;
  // Marks the option declared last as a secret (OptionBinding::Secret()).
  OptionSchema& MarkLastSecret() {
    if (!options_.empty()) options_.back().secret = true;
    return *this;
  }

  // Checks `node` (a mapping, keys starting with '_' ignored) against the declaration and
  // returns a copy with defaults filled in. `key` names the node in messages ("model").
  absl::StatusOr<config::NodePtr> Apply(const config::Node& node, const std::string& key,
                                        const std::string& component) const;

 private:
  OptionSchema& Push(OptionSpec spec);
  std::vector<OptionSpec> options_;
};

// Registers the secret options of `schema` (OptionBinding::Secret()) under the config key the
// component reads them from ("serve" -> "serve.token"): kiln then prints and stores them as ***.
void RegisterSecretOptions(const std::string& key, const OptionSchema& schema);

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
  Options& Set(const std::string& key, double value) {
    return Put(key, config::Node::Float(value));
  }
  Options& Set(const std::string& key, const char* value) {
    return Put(key, config::Node::String(value));
  }
  Options& Set(const std::string& key, const std::string& value) {
    return Put(key, config::Node::String(value));
  }
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

// What a bound component's factory may need besides its options struct: refusing a value that
// fails only together with another option (sgd's nesterov without momentum) with
// OptionValueError's message, and an option's full key for messages given later ("set
// 'scheduler.total_steps'").
class OptionContext {
 public:
  // `options`: the validated options with their key prefix; `component`: "scheduler 'one_cycle'".
  OptionContext(config::Config options, std::string component)
      : options_(std::move(options)), component_(std::move(component)) {}
  // "option 'KEY' of COMPONENT must be WHAT, got VALUE (set at ...)" for option `name`.
  absl::Status Refuse(const std::string& name, const std::string& what) const;
  std::string FullKey(const std::string& name) const { return options_.FullKey(name); }
  const std::string& component() const { return component_; }
  // The validated options, defaults filled in (to validate a part that overrides some of them,
  // as an optimizer's param_groups do).
  const config::Config& options() const { return options_; }

 private:
  config::Config options_;
  std::string component_;
};

namespace internal {
// How a C++ field type maps to an option: its OptionType, its default as a node, and reading
// it back from a validated node. A type whose values need more than the OptionType says (a list
// of integers) also has `Accepts` and `kWhat`, asked before its declared check.
template <typename F, typename = void>
struct OptionField;
template <typename F, typename = void>
struct HasAccepts : std::false_type {};
template <typename F>
struct HasAccepts<
    F, std::void_t<decltype(OptionField<F>::Accepts(std::declval<const config::Node&>()))>>
    : std::true_type {};
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
// Lists of numbers: any length (std::vector) or exactly two ([low, high], [time, frequency]).
// Integers are accepted where floats are.
template <typename T>
struct NumberList {
  static constexpr OptionType kType = OptionType::kList;
  static bool Accepts(const config::Node& n, size_t size);  // size 0: any
  static std::vector<T> Items(const config::Node& n);
  static config::NodePtr ToNode(const std::vector<T>& v);
};
template <typename T>
struct OptionField<std::vector<T>,
                   std::enable_if_t<std::is_same_v<T, int64_t> || std::is_same_v<T, double>>>
    : NumberList<T> {
  static constexpr const char* kWhat =
      std::is_same_v<T, int64_t> ? "a list of integers" : "a list of numbers";
  static bool Accepts(const config::Node& n) { return NumberList<T>::Accepts(n, 0); }
  static std::vector<T> From(const config::Node& n) { return NumberList<T>::Items(n); }
};
template <typename T>
struct OptionField<std::pair<T, T>,
                   std::enable_if_t<std::is_same_v<T, int64_t> || std::is_same_v<T, double>>>
    : NumberList<T> {
  static constexpr const char* kWhat =
      std::is_same_v<T, int64_t> ? "a list of two integers" : "a list of two numbers";
  static bool Accepts(const config::Node& n) { return NumberList<T>::Accepts(n, 2); }
  static config::NodePtr ToNode(const std::pair<T, T>& v) {
    return NumberList<T>::ToNode({v.first, v.second});
  }
  static std::pair<T, T> From(const config::Node& n) {
    std::vector<T> items = NumberList<T>::Items(n);
    return {items[0], items[1]};
  }
};
template <>
struct OptionField<config::NodePtr> {
  static constexpr OptionType kType = OptionType::kAny;
  static config::NodePtr ToNode(const config::NodePtr& v) { return v ? v : config::Node::Null(); }
  static config::NodePtr From(const config::Node& n) { return n.Clone(); }
};
// A nested part kept as config, with its full key for messages (a `{_target_: ...}` mapping the
// factory instantiates, a list of them); null by default. OptionBinding::Fill sets it.
template <>
struct OptionField<config::Config> {
  static constexpr OptionType kType = OptionType::kAny;
  static config::NodePtr ToNode(const config::Config&) { return config::Node::Null(); }
};
template <typename T, bool kChecked = HasAccepts<T>::value>
struct OptionalAccepts {};
template <typename T>
struct OptionalAccepts<T, true> {
  static constexpr const char* kWhat = OptionField<T>::kWhat;
  static bool Accepts(const config::Node& n) { return OptionField<T>::Accepts(n); }
};
template <typename T>
struct OptionField<std::optional<T>> : OptionalAccepts<T> {
  static constexpr OptionType kType = OptionField<T>::kType;
  static config::NodePtr ToNode(const std::optional<T>& v) {
    return v.has_value() ? OptionField<T>::ToNode(*v) : config::Node::Null();
  }
  static std::optional<T> From(const config::Node& n) {
    if (n.is_null()) return std::nullopt;
    return OptionField<T>::From(n);
  }
};
template <typename F>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {
  using Inner = T;
};
}  // namespace internal

// The options struct of a component that takes none: OptionBinding<NoOptions>().
struct NoOptions {};

// A component's options bound to the fields of its options struct, each declared once: name,
// type (from the field), default, doc and check. The registry validates a config node against
// the declaration, fills the struct and hands it to the factory, which reads nothing by string:
//
//   struct LocalOptions { int64_t n_jobs = -1; };
//   OptionBinding<LocalOptions>().Field("n_jobs", &LocalOptions::n_jobs, "jobs at once",
//                                       AtLeast(-1));
//
// The field's initial value in a default-constructed S is the option's default; a
// std::optional field defaults to null and accepts null. Field types: bool, int, int64_t, double,
// std::string, std::vector<std::string>, std::vector<int64_t>, std::vector<double>,
// std::pair<int64_t, int64_t> and std::pair<double, double> (a list of exactly two), std::optional
// of these, and through Node: config::NodePtr (a value kept as it is) or config::Config (a nested
// part with its full key, for instantiating a `{_target_: ...}` component in the factory).
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
  // A config node (config::NodePtr) or nested config (config::Config) kept as it is, of the
  // declared type; null by default and accepted (Node), or required (RequiredNode).
  template <typename F>
  OptionBinding& Node(std::string name, F S::*field, OptionType type, std::string doc,
                      OptionCheck check = {}) {
    return Bind(DeclareNode(std::move(name), field, type, std::move(doc), std::move(check)), field);
  }
  template <typename F>
  OptionBinding& RequiredNode(std::string name, F S::*field, OptionType type, std::string doc,
                              OptionCheck check = {}) {
    OptionSpec spec = DeclareNode(std::move(name), field, type, std::move(doc), std::move(check));
    spec.default_value = nullptr;
    spec.nullable = false;
    return Bind(std::move(spec), field);
  }

  // An option whose value needs reading beyond its type (seconds or "DD:HH:MM:SS", true or a
  // count): `read` returns the field's value, or nullopt to refuse the value as not `what`.
  // `default_text` is the default as override text ("1.0", "null", "false"); a null default
  // makes null an accepted value, which `read` then receives too.
  template <typename F>
  OptionBinding& Parsed(std::string name, F S::*field, OptionType type,
                        const std::string& default_text, std::string doc, std::string what,
                        std::function<std::optional<F>(const config::Node&)> read) {
    OptionSpec spec = OptionSpecFromText(std::move(name), type, default_text, std::move(doc));
    spec.check = {std::move(what), [read](const config::Node& n) { return read(n).has_value(); }};
    setters_.push_back([name = spec.name, field, read](const config::Config& options, S& out) {
      out.*field = *read(*options.node()->Find(name));
    });
    schema_.Add(std::move(spec));
    return *this;
  }
  // An option whose named values fill an enum field, compared as Python's str() prints them
  // (`precision: 32` and `precision: "32"` alike); the default is the name of the field's
  // initial value:
  //   .Enum("precision", &O::precision, {{"32", P::k32}, {"bf16-mixed", P::kBf16Mixed}}, "doc")
  template <typename E>
  OptionBinding& Enum(std::string name, E S::*field, std::vector<std::pair<std::string, E>> values,
                      std::string doc) {
    std::vector<std::string> names;
    std::string default_name;
    for (const auto& [value_name, value] : values) {
      names.push_back(value_name);
      if (default_name.empty() && value == S().*field) default_name = value_name;
    }
    return Parsed<E>(std::move(name), field, EnumOptionType(names), default_name, std::move(doc),
                     OneOf(names).what, [values](const config::Node& n) -> std::optional<E> {
                       if (n.is_null() || !n.is_scalar()) return std::nullopt;
                       std::string text = config::PythonStr(n);
                       for (const auto& [value_name, value] : values) {
                         if (value_name == text) return value;
                       }
                       return std::nullopt;
                     });
  }

  // The declaration (what `kiln list` and docs/components.md show).
  const OptionSchema& schema() const { return schema_; }
  // The option declared just before is a secret (a token, a password): its value is shown as ***
  // wherever kiln stores or prints a config, once RegisterSecretOptions names where it sits.
  OptionBinding& Secret() {
    schema_.MarkLastSecret();
    return *this;
  }
  // The struct from options that the schema has validated and completed (with their key prefix,
  // which config::Config fields keep).
  S Fill(const config::Config& options) const {
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
    if (check.each) {
      spec.item_check = std::move(check);
    } else {
      spec.check = std::move(check);
    }
    if constexpr (internal::HasAccepts<F>::value) {
      OptionCheck typed{Traits::kWhat, &Traits::Accepts};
      if (spec.check) {
        OptionCheck extra = spec.check;
        spec.check = {typed.what + " (" + extra.what + ")", [typed, extra](const config::Node& n) {
                        return typed.accepts(n) && extra.accepts(n);
                      }};
      } else {
        spec.check = typed;
      }
    }
    return spec;
  }
  template <typename F>
  static OptionSpec DeclareNode(std::string name, F S::*field, OptionType type, std::string doc,
                                OptionCheck check) {
    static_assert(std::is_same_v<F, config::NodePtr> || std::is_same_v<F, config::Config>);
    OptionSpec spec = Declare(std::move(name), field, std::move(doc), std::move(check));
    spec.type = type;
    return spec;
  }
  template <typename F>
  OptionBinding& Bind(OptionSpec spec, F S::*field) {
    setters_.push_back([name = spec.name, field](const config::Config& options, S& out) {
      config::NodePtr value = options.node()->Find(name);
      if constexpr (std::is_same_v<F, config::Config>) {
        out.*field = config::Config(value, options.FullKey(name));
      } else {
        out.*field = internal::OptionField<F>::From(*value);
      }
    });
    schema_.Add(std::move(spec));
    return *this;
  }

  OptionSchema schema_;
  std::vector<std::function<void(const config::Config&, S&)>> setters_;
};

}  // namespace kiln
