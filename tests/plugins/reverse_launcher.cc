// Test plugin: a launcher that runs a multirun's jobs last to first, and a config folder.
#include <memory>

#include "lib/registry/plugin.h"
#include "lib/sweep/launcher.h"

namespace {

class ReverseLauncher : public kiln::sweep::Launcher {
 public:
  absl::Status Launch(const std::vector<kiln::sweep::SweepJob>& jobs,
                      const kiln::sweep::LaunchContext& context) override {
    for (size_t i = jobs.size(); i-- > 0;) {
      if (auto status = context.run(jobs[i]); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
};

void Register(kiln::Registrar& registrar) {
  registrar.Add<kiln::sweep::Launcher>(
      "reverse", "Runs the jobs last to first (test plugin)", kiln::OptionSchema(),
      [](const kiln::config::Config&) -> absl::StatusOr<std::shared_ptr<kiln::sweep::Launcher>> {
        return std::make_shared<ReverseLauncher>();
      });
}

}  // namespace

KILN_PLUGIN("reverse_launcher", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
