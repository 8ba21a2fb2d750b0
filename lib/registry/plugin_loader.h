// Finds, inspects and loads kiln plugins (lib/registry/plugin.h describes the ABI).
//
// Inspecting reads a plugin's manifest from the file (its `.kiln_plugin` section) without
// loading it, and checks that it was built for this kiln: the same plugin ABI, kiln version
// (major.minor) and LibTorch version. Loading then dlopens it (RTLD_NOW, never unloaded), calls
// its entry function and adds everything it registers, recording the plugin as the origin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

struct PluginManifest {
  std::string path;  // the library, as a canonical absolute path
  uint32_t abi_version = 0;
  std::string kiln_version;
  std::string torch_version;
  std::string name;
  std::string version;
  std::string config_dir;  // absolute; "" when the plugin ships no configs

  // "plugin NAME VERSION (PATH)": the origin `kiln list` shows for its components.
  std::string Origin() const;
};

// Reads and checks a plugin's manifest without loading the library.
absl::StatusOr<PluginManifest> InspectPlugin(const std::string& path);

// Loads a plugin once (later calls return the same manifest) and registers its components.
absl::StatusOr<PluginManifest> LoadPlugin(const std::string& path);
// The same for a manifest InspectPlugin returned (the file is not read again).
absl::StatusOr<PluginManifest> LoadPlugin(const PluginManifest& manifest);

// The plugins loaded so far, in load order.
std::vector<PluginManifest> LoadedPlugins();

// Expands a KILN_PLUGIN_PATH value (':'-separated): a file is a plugin; a folder contributes
// every kiln plugin (`*.so` with a manifest) directly inside it, in name order.
absl::StatusOr<std::vector<std::string>> PluginsOnPath(const std::string& path_list);

// A plugin named in a `plugins:` list or by --plugin: a path (relative to the working
// directory), or the bare name of a plugin installed in `installed_dir` (lib<name>.so).
absl::StatusOr<std::string> ResolvePluginReference(const std::string& reference,
                                                   const std::string& installed_dir);

}  // namespace kiln
