// kiln 0.1.0's names for lib/run's and lib/sweep's plugin-facing types (kiln::app::...) still name
// the same types, until the version after 0.1.0 (docs/plugins.md): a plugin built against them
// registers into the same registries.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "lib/registry/registry.h"
#include "lib/run/command.h"
#include "lib/sweep/launcher.h"
#include "lib/sweep/sweeper.h"

namespace kiln {
namespace {

static_assert(std::is_same_v<app::Launcher, sweep::Launcher>);
static_assert(std::is_same_v<app::LaunchContext, sweep::LaunchContext>);
static_assert(std::is_same_v<app::SweepJob, sweep::SweepJob>);
static_assert(std::is_same_v<app::FinishedJob, sweep::FinishedJob>);
static_assert(std::is_same_v<app::Sweeper, sweep::Sweeper>);
static_assert(std::is_same_v<app::SweepSession, sweep::SweepSession>);
static_assert(std::is_same_v<app::JobResult, sweep::JobResult>);
static_assert(std::is_same_v<app::BatchResult, sweep::BatchResult>);
static_assert(std::is_same_v<app::JobContext, run::JobContext>);
static_assert(std::is_same_v<app::CommandFn, run::CommandFn>);

TEST(OldNames, ACommandRegisteredUnderTheOldNameIsFoundUnderTheNew) {
  app::RegisterCommand("old_names_test_command", [](app::JobContext&) { return absl::OkStatus(); });
  EXPECT_TRUE(run::HasCommand("old_names_test_command"));
  EXPECT_EQ(app::ExitCodeFor(absl::OkStatus()), run::ExitCodeFor(absl::OkStatus()));
  // The built-in launchers, registered as sweep::Launcher, are there under the old name's kind.
  std::vector<std::string> names = RegistryHub::Instance().Names(app::Launcher::kKind);
  EXPECT_NE(std::find(names.begin(), names.end(), "local"), names.end());
}

}  // namespace
}  // namespace kiln
