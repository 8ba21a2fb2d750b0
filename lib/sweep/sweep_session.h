// The machinery every sweeper runs in: the sweep folder (created, with multirun.yaml, before
// the first job), the ledger (a re-run into the same folder skips the jobs recorded as done,
// and refuses a folder that holds another sweep), the launcher, and the summary of every
// job's final metrics written at the end (summary.csv).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/config/repository.h"
#include "lib/sweep/launcher.h"
#include "lib/sweep/sweeper.h"

namespace kiln::sweep {

struct SweepSetup {
  std::vector<config::Override> arguments;  // the command line's overrides
  config::NodePtr config;                   // the sweep's composed config (multirun.yaml's)
  const config::ConfigRepository* repo = nullptr;
  bool dry_run = false;    // print the jobs, run none
  bool fail_fast = false;  // stop after the first failed job
  // Not needed under dry_run:
  std::string sweep_dir;
  std::string multirun_yaml;           // written to SWEEP_DIR/multirun.yaml
  std::shared_ptr<Launcher> launcher;  // runs the jobs
  LaunchContext context;               // how a job runs (sweep_dir and fail_fast are filled in)
  std::function<void(const std::string&)> print;  // standard output (dry-run plans)
};

// Runs `sweeper` in a session made from `setup`, then writes the summary (when the launcher
// waits for its jobs).
absl::Status RunSweep(Sweeper& sweeper, SweepSetup setup);

}  // namespace kiln::sweep
