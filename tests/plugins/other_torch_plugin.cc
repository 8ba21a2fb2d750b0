// Test plugin: claims to be built against another LibTorch.
#define KILN_PLUGIN_TORCH_VERSION "0.4.1"
#include "lib/registry/plugin.h"

namespace {
void Register(kiln::Registrar&) {}
}  // namespace

KILN_PLUGIN("other_torch_plugin", "1.0.0", Register, "")
