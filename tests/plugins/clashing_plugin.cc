// Test plugin: registers a launcher named like a built-in one.
#include "lib/registry/plugin.h"
#include "lib/sweep/launcher.h"

namespace {

void Register(kiln::Registrar& registrar) {
  registrar.Add<kiln::sweep::Launcher>(
      "basic", "A second 'basic' (test plugin)", kiln::OptionSchema(),
      [](const kiln::config::Config&) -> absl::StatusOr<std::shared_ptr<kiln::sweep::Launcher>> {
        return absl::UnimplementedError("never built");
      });
}

}  // namespace

KILN_PLUGIN("clashing_plugin", "1.0.0", Register, "")
