// Launchers run the jobs of a multirun. `basic` runs them one after another in this process,
// like Hydra's BasicLauncher; others (local processes, SLURM) register under the same kind.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kiln::app {

// Runs job `index` with its overrides.
using JobFn = std::function<absl::Status(size_t index, const std::vector<std::string>& overrides)>;

class Launcher {
 public:
  static constexpr const char* kKind = "launcher";
  virtual ~Launcher() = default;
  virtual absl::Status Launch(const std::vector<std::vector<std::string>>& jobs, const JobFn& run) = 0;
};

}  // namespace kiln::app
