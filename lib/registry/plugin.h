// The plugin ABI: a shared library that adds components (and configs) to kiln without forking it.
//
//   void Register(kiln::Registrar& registrar) {
//     registrar.Add<kiln::Model>("tiny_convnet", "A two-layer CNN", binding, Build);
//     registrar.AddResolver("tiny.double", Double);  // ${tiny.double:21} in any config
//   }
//   KILN_PLUGIN("tiny_convnet", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR);
//
// KILN_PLUGIN defines the one exported entry function, `kilnGetPluginInfo`, and a copy of its
// versions and config directory in the library's `.kiln_plugin` section, which kiln reads from
// the file without loading it (Qt's plugin metadata does the same): composing a config with a
// plugin's config directory on the search path (`kiln train --cfg job`) never pays for loading
// LibTorch. kiln loads the library with RTLD_NOW only for commands that build components,
// checks the versions, and never unloads it (LLVM's pass-plugin pattern).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "lib/base/version.h"
#include "lib/config/interpolation.h"
#include "lib/registry/registry.h"

// The LibTorch version a plugin is built against; "" for a plugin that does not use LibTorch.
#ifndef KILN_PLUGIN_TORCH_VERSION
#if __has_include(<torch/version.h>)
#include <torch/version.h>
#define KILN_PLUGIN_TORCH_VERSION TORCH_VERSION
#else
#define KILN_PLUGIN_TORCH_VERSION ""
#endif
#endif

// The plugin's config folder, relative to the library's own folder (kiln_add_plugin defines it).
#ifndef KILN_PLUGIN_CONFIG_DIR
#define KILN_PLUGIN_CONFIG_DIR ""
#endif

namespace kiln {

// Bumped whenever KilnPluginInfo, KilnPluginManifest or Registrar change incompatibly, or the
// virtual functions of an interface plugins implement (Task, Model, Callback, Logger, ...) change:
// 3 for Callback::OnJobEnd and Task::Complete; 4 for Task::TokenizerFiles and
// Tokenizer::HuggingFaceFiles; 5 for CausalLm::forward_packed and data::Example::segments; 6 for
// data::EpochSource::GetStacked.
inline constexpr uint32_t kPluginAbiVersion = 6;

// What a plugin's register function adds: components of any kind (models, ..., launchers,
// sweepers) and config resolvers. The loader adds all of it or, when one name is already
// taken, none of it, and records the plugin as each one's origin.
class Registrar {
 public:
  struct Pending {
    ComponentInfo info;
    std::shared_ptr<void> factory;
  };

  template <typename T>
  void Add(std::string name, std::string doc, OptionSchema options,
           typename Registry<T>::Factory factory) {
    auto [info, stored] =
        Registry<T>::Entry(std::move(name), std::move(doc), std::move(options), std::move(factory));
    pending_.push_back({std::move(info), std::move(stored)});
  }

  // A component whose options are bound to a struct (OptionBinding<S>): `build` takes
  // `const S&`, or `(const S&, const OptionContext&)` to refuse options that fail together; a
  // lambda will do, as with KILN_REGISTER_BOUND.
  template <typename T, typename S, typename F>
  void Add(std::string name, std::string doc, const OptionBinding<S>& binding, F build) {
    using Build = typename Registry<T>::template BoundFactory<S>;
    Build factory;
    if constexpr (std::is_invocable_v<F, const S&, const OptionContext&>) {
      factory = Build(std::move(build));
    } else {
      factory = Build([build = std::move(build)](const S& options, const OptionContext&) {
        return build(options);
      });
    }
    auto [info, stored] =
        Registry<T>::Entry(std::move(name), std::move(doc), binding, std::move(factory));
    pending_.push_back({std::move(info), std::move(stored)});
  }

  // A config resolver (`${name:args}`), registered in config::ResolverRegistry::Default().
  void AddResolver(std::string name, config::ResolverFn fn) {
    resolvers_.emplace_back(std::move(name), std::move(fn));
  }

  const std::vector<Pending>& pending() const { return pending_; }
  const std::vector<std::pair<std::string, config::ResolverFn>>& resolvers() const {
    return resolvers_;
  }

 private:
  std::vector<Pending> pending_;
  std::vector<std::pair<std::string, config::ResolverFn>> resolvers_;
};

}  // namespace kiln

extern "C" {

// Fixed-size fields, no pointers: readable straight from the file.
struct KilnPluginManifest {
  char magic[16];  // "kiln-plugin"
  uint32_t abi_version;
  char kiln_version[32];
  char torch_version[32];
  char name[64];
  char version[32];
  char config_dir[256];
};

struct KilnPluginInfo {
  uint32_t abi_version;
  const char* kiln_version;   // the kiln it was built against
  const char* torch_version;  // the LibTorch it was built against ("" for none)
  const char* name;
  const char* version;
  void (*register_components)(kiln::Registrar&);
  const char*
      config_dir;  // joins the config search path; relative to the library's folder; "" for none
};

typedef KilnPluginInfo (*KilnGetPluginInfoFn)();

}  // extern "C"

#define KILN_PLUGIN_MAGIC "kiln-plugin"
#define KILN_PLUGIN_SECTION ".kiln_plugin"
#define KILN_PLUGIN_ENTRY "kilnGetPluginInfo"

// Declares the plugin: name, version, register function, config folder (or "").
#define KILN_PLUGIN(NAME, VERSION, REGISTER_FN, CONFIG_DIR)                              \
  extern "C" __attribute__((visibility("default"), used, section(KILN_PLUGIN_SECTION)))  \
  const KilnPluginManifest kiln_plugin_manifest = {KILN_PLUGIN_MAGIC,                    \
                                                   ::kiln::kPluginAbiVersion,            \
                                                   KILN_VERSION_STRING,                  \
                                                   KILN_PLUGIN_TORCH_VERSION,            \
                                                   NAME,                                 \
                                                   VERSION,                              \
                                                   CONFIG_DIR};                          \
  extern "C" __attribute__((visibility("default"))) KilnPluginInfo kilnGetPluginInfo() { \
    const KilnPluginManifest& m = kiln_plugin_manifest;                                  \
    return KilnPluginInfo{m.abi_version, m.kiln_version, m.torch_version, m.name,        \
                          m.version,     &REGISTER_FN,   m.config_dir};                  \
  }
