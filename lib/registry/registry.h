// String-keyed component registries, one per kind (model, datamodule, optimizer, callback,
// launcher, ...), all owned by Kiln::core so every plugin and library sees the same ones.
//
//   KILN_REGISTER_BOUND(Launcher, "basic", "Runs jobs one after another",
//                       OptionBinding<NoOptions>(), Factory);
//   auto launcher = Registry<Launcher>::Get().Instantiate(cfg.Sub("hydra.launcher").value());
//
// A registered base type declares `static constexpr const char* kKind = "launcher";`.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/registry/options.h"

namespace kiln {

struct ComponentInfo {
  std::string kind;
  std::string name;
  std::string doc;
  OptionSchema options;
  std::string origin = "built-in";  // or "plugin NAME (path)"
};

// The type-erased store behind every Registry<T>.
class RegistryHub {
 public:
  static RegistryHub& Instance();

  struct Entry {
    ComponentInfo info;
    std::shared_ptr<void> factory;  // points to Registry<T>::Factory for the kind's T
  };

  absl::Status Add(ComponentInfo info, std::shared_ptr<void> factory);
  const Entry* Find(const std::string& kind, const std::string& name) const;
  std::vector<std::string> Names(const std::string& kind) const;
  std::vector<std::string> Kinds() const;
  std::vector<const ComponentInfo*> Components(const std::string& kind) const;

  // Origin recorded for components registered from now on (the plugin loader sets it).
  void set_current_origin(std::string origin) { current_origin_ = std::move(origin); }
  const std::string& current_origin() const { return current_origin_; }

 private:
  std::map<std::string, std::map<std::string, Entry>> kinds_;
  std::string current_origin_ = "built-in";
};

// "unknown model 'resnt' — did you mean 'resnet'? known: cnn, mlp, resnet".
std::string UnknownComponentMessage(const std::string& kind, const std::string& name);

template <typename T>
class Registry {
 public:
  using Factory = std::function<absl::StatusOr<std::shared_ptr<T>>(const config::Config& options)>;

  static Registry& Get() {
    static Registry registry;
    return registry;
  }

  // What the hub stores for one component of this kind.
  static std::pair<ComponentInfo, std::shared_ptr<void>> Entry(std::string name, std::string doc,
                                                               OptionSchema options,
                                                               Factory factory) {
    ComponentInfo info;
    info.kind = T::kKind;
    info.name = std::move(name);
    info.doc = std::move(doc);
    info.options = std::move(options);
    return {std::move(info), std::make_shared<Factory>(std::move(factory))};
  }

  // A component whose options are bound to a struct: the factory receives the filled struct, and
  // where it checks options together, the context to refuse them with (OptionContext).
  template <typename S>
  using BoundFactory =
      std::function<absl::StatusOr<std::shared_ptr<T>>(const S&, const OptionContext&)>;

  template <typename S>
  static std::pair<ComponentInfo, std::shared_ptr<void>> Entry(std::string name, std::string doc,
                                                               const OptionBinding<S>& binding,
                                                               BoundFactory<S> build) {
    Factory factory = [binding, build = std::move(build),
                       component = ComponentName(name)](const config::Config& cfg) {
      return build(binding.Fill(cfg), OptionContext(cfg, component));
    };
    return Entry(std::move(name), std::move(doc), binding.schema(), std::move(factory));
  }
  template <typename S>
  static std::pair<ComponentInfo, std::shared_ptr<void>> Entry(
      std::string name, std::string doc, const OptionBinding<S>& binding,
      std::function<absl::StatusOr<std::shared_ptr<T>>(const S&)> build) {
    return Entry(
        std::move(name), std::move(doc), binding,
        BoundFactory<S>([build = std::move(build)](const S& options, const OptionContext&) {
          return build(options);
        }));
  }

  template <typename S>
  absl::Status Register(std::string name, std::string doc, const OptionBinding<S>& binding,
                        BoundFactory<S> build) {
    auto [info, stored] = Entry(std::move(name), std::move(doc), binding, std::move(build));
    return RegistryHub::Instance().Add(std::move(info), std::move(stored));
  }

  absl::Status Register(std::string name, std::string doc, OptionSchema options, Factory factory) {
    auto [info, stored] =
        Entry(std::move(name), std::move(doc), std::move(options), std::move(factory));
    return RegistryHub::Instance().Add(std::move(info), std::move(stored));
  }

  bool Contains(const std::string& name) const {
    return RegistryHub::Instance().Find(T::kKind, name) != nullptr;
  }

  // Builds the component a config node names with `_target_`, after validating its options.
  absl::StatusOr<std::shared_ptr<T>> Instantiate(const config::Config& node) const {
    auto target = node.Get<std::string>("_target_");
    if (!target.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", node.prefix().empty() ? std::string("config") : node.prefix(),
                       "' needs a _target_ naming a ", T::kKind, ": ", target.status().message()));
    }
    return Instantiate(*target, node);
  }

  // Builds component `name` from options written in C++.
  absl::StatusOr<std::shared_ptr<T>> Instantiate(const std::string& name,
                                                 const Options& options) const {
    return Instantiate(name, options.config());
  }

  // Builds component `name` with the options in `node` (keys starting with '_' are ignored).
  absl::StatusOr<std::shared_ptr<T>> Instantiate(const std::string& name,
                                                 const config::Config& node) const {
    const RegistryHub::Entry* entry = RegistryHub::Instance().Find(T::kKind, name);
    if (entry == nullptr) {
      std::string where = node.WhereSet("_target_");
      return absl::NotFoundError(UnknownComponentMessage(T::kKind, name) +
                                 (where.empty() ? "" : " (set at " + where + ")"));
    }
    auto applied = entry->info.options.Apply(*node.node(), node.prefix(), ComponentName(name));
    if (!applied.ok()) return applied.status();
    const auto& factory = *static_cast<const Factory*>(entry->factory.get());
    return factory(config::Config(*applied, node.prefix()));
  }

 private:
  // "model 'mlp'", as messages name a component.
  static std::string ComponentName(const std::string& name) {
    return std::string(T::kKind) + " '" + name + "'";
  }
};

}  // namespace kiln

#define KILN_REGISTRY_CONCAT_INNER(a, b) a##b
#define KILN_REGISTRY_CONCAT(a, b) KILN_REGISTRY_CONCAT_INNER(a, b)

// Registers a component when the shared library that holds this line is loaded.
// The factory is the variadic tail, so commas inside a lambda body need no parentheses.
#define KILN_REGISTER(Base, name, doc, options, ...)                                       \
  static const bool KILN_REGISTRY_CONCAT(kiln_registered_, __COUNTER__) = [] {             \
    auto status = ::kiln::Registry<Base>::Get().Register(name, doc, options, __VA_ARGS__); \
    if (!status.ok()) ::kiln::internal::ReportRegistrationFailure(status);                 \
    return true;                                                                           \
  }()

// The same for a component whose options are bound to a struct (OptionBinding): the factory
// takes `const S&`, e.g. [](const LocalOptions& o) -> absl::StatusOr<std::shared_ptr<Launcher>>,
// or `(const S&, const OptionContext&)` when it refuses options that fail together.
#define KILN_REGISTER_BOUND(Base, name, doc, binding, ...)                      \
  static const bool KILN_REGISTRY_CONCAT(kiln_registered_, __COUNTER__) = [] {  \
    auto status = ::kiln::Registry<Base>::Get().Register(                       \
        name, doc, binding, ::kiln::internal::BoundFactory<Base>(__VA_ARGS__)); \
    if (!status.ok()) ::kiln::internal::ReportRegistrationFailure(status);      \
    return true;                                                                \
  }()

namespace kiln::internal {
// Turns a lambda `(const S&) -> StatusOr<shared_ptr<Base>>`, or one that also takes the
// OptionContext, into the std::function the registry takes, deducing S from its first parameter.
template <typename F>
struct LambdaArg;
template <typename C, typename R, typename A>
struct LambdaArg<R (C::*)(const A&) const> {
  using Type = A;
};
template <typename C, typename R, typename A>
struct LambdaArg<R (C::*)(const A&, const OptionContext&) const> {
  using Type = A;
};
template <typename Base, typename F>
auto BoundFactory(F f) {
  using S = typename LambdaArg<decltype(&F::operator())>::Type;
  using Build = typename Registry<Base>::template BoundFactory<S>;
  if constexpr (std::is_invocable_v<F, const S&, const OptionContext&>) {
    return Build(std::move(f));
  } else {
    return Build([f = std::move(f)](const S& options, const OptionContext&) { return f(options); });
  }
}
}  // namespace kiln::internal

namespace kiln::internal {
// Registration runs before main; a clash is reported once and the process exits with code 2.
void ReportRegistrationFailure(const absl::Status& status);
}  // namespace kiln::internal
