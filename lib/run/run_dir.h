// Hydra's run directory: `outputs/DATE/TIME/` (or `multirun/DATE/TIME/N/`) holding
// `.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml` and the job's log file. kiln never
// changes the working directory; paths in the config stay relative to where you ran it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/config/compose.h"

namespace kiln::run {

struct RunDir {
  std::string output_dir;
  std::string log_file;  // empty when job logging to a file is off
};

// Decides where the job writes: fills hydra.job.num/id and hydra.runtime.output_dir and
// resolves the log file name. Writes nothing. `job_num` < 0 means a single run
// (hydra.run.dir); otherwise the job's directory is `sweep_dir/<hydra.sweep.subdir>`.
absl::StatusOr<RunDir> PlanRunDir(config::ComposeResult& composed, int job_num,
                                  const std::string& sweep_dir);
// Creates the directory and writes the `.hydra` files.
absl::Status WriteRunDir(const config::ComposeResult& composed, const RunDir& run);

}  // namespace kiln::run
