// Expands multirun overrides into jobs, like Hydra's BasicSweeper: the cartesian product of
// every sweep in command-line order, each job a list of plain overrides.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/node.h"
#include "lib/config/override.h"

namespace kiln::config {

class ConfigRepository;  // lib/config/repository.h, not installed

// hydra.sweeper.params: `key: sweep` entries in override syntax (`lr: 0.1,0.01`); null: none.
absl::StatusOr<std::vector<Override>> ParseSweepParams(const NodePtr& params);

// `params` (from hydra.sweeper.params), then the command line's `overrides`: a later override of
// a key replaces an earlier one in place, so each key appears once, where it first appeared.
std::vector<Override> MergeSweepOverrides(const std::vector<Override>& params,
                                          const std::vector<Override>& overrides);

// `params` (from hydra.sweeper.params) come first; later duplicates of a key replace earlier
// ones in place. glob() sweeps read the options of their config group from `repo`.
absl::StatusOr<std::vector<std::vector<std::string>>> PlanSweep(
    const std::vector<Override>& params, const std::vector<Override>& overrides,
    const ConfigRepository& repo);

}  // namespace kiln::config
