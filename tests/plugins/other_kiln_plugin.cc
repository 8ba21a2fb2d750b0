// Test plugin: a manifest as a plugin built against kiln 0.0.9 would write it.
#include "lib/registry/plugin.h"

namespace {
void Register(kiln::Registrar&) {}
}  // namespace

extern "C" __attribute__((visibility("default"), used, section(KILN_PLUGIN_SECTION)))
const KilnPluginManifest kiln_plugin_manifest = {KILN_PLUGIN_MAGIC,
                                                 ::kiln::kPluginAbiVersion,
                                                 "0.0.9",
                                                 KILN_PLUGIN_TORCH_VERSION,
                                                 "other_kiln_plugin",
                                                 "1.0.0",
                                                 ""};
extern "C" __attribute__((visibility("default"))) KilnPluginInfo kilnGetPluginInfo() {
  return KilnPluginInfo{::kiln::kPluginAbiVersion,
                        "0.0.9",
                        KILN_PLUGIN_TORCH_VERSION,
                        "other_kiln_plugin",
                        "1.0.0",
                        &Register,
                        ""};
}
