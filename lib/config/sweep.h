// Expands multirun overrides into jobs, like Hydra's BasicSweeper: the cartesian product of
// every sweep in command-line order, each job a list of plain overrides.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/override.h"
#include "lib/config/repository.h"

namespace kiln::config {

// `params` (from hydra.sweeper.params) come first; later duplicates of a key replace earlier
// ones in place. glob() sweeps read the options of their config group from `repo`.
absl::StatusOr<std::vector<std::vector<std::string>>> PlanSweep(const std::vector<Override>& params,
                                                                const std::vector<Override>& overrides,
                                                                const ConfigRepository& repo);

}  // namespace kiln::config
