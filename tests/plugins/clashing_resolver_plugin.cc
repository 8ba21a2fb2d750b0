// Test plugin: registers the config resolver `oc.env`, which kiln already has; refused.
#include "lib/registry/plugin.h"

namespace {

void Register(kiln::Registrar& registrar) {
  registrar.AddResolver(
      "oc.env", [](const kiln::config::ResolverCall&) -> absl::StatusOr<kiln::config::NodePtr> {
        return kiln::config::Node::String("replaced");
      });
}

}  // namespace

KILN_PLUGIN("clashing_resolver_plugin", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
