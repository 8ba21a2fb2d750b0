// Test plugin: names a config folder that does not exist.
#include "lib/registry/plugin.h"

namespace {
void Register(kiln::Registrar&) {}
}  // namespace

KILN_PLUGIN("missing_configs_plugin", "1.0.0", Register, "no-such-configs")
