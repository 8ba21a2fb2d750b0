// Test plugin: a manifest and entry function as a future kiln (plugin ABI 99) would write them.
#include "lib/registry/plugin.h"

namespace {
void Register(kiln::Registrar&) {}
}  // namespace

extern "C" __attribute__((visibility("default"), used, section(KILN_PLUGIN_SECTION)))
const KilnPluginManifest kiln_plugin_manifest = {
    KILN_PLUGIN_MAGIC, 99, KILN_VERSION_STRING, KILN_PLUGIN_TORCH_VERSION, "other_abi_plugin",
    "1.0.0",           ""};
extern "C" __attribute__((visibility("default"))) KilnPluginInfo kilnGetPluginInfo() {
  return KilnPluginInfo{
      99, KILN_VERSION_STRING, KILN_PLUGIN_TORCH_VERSION, "other_abi_plugin", "1.0.0", &Register,
      ""};
}
