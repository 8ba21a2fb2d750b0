// Launchers run the jobs of a multirun. `basic` runs them one after another in this process,
// like Hydra's BasicLauncher; `local` runs up to n_jobs at once, each in a `kiln` process of its
// own (like Hydra's joblib launcher); `slurm` submits them as an sbatch array. Plugins can
// register more under the same kind.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::sweep {

struct SweepJob {
  size_t index = 0;                    // the job's number in the sweep (its folder name)
  std::vector<std::string> overrides;  // the job's own overrides
};

struct LaunchContext {
  std::string sweep_dir;
  bool fail_fast = false;  // stop launching after the first failed job
  // Runs a job in this process.
  std::function<absl::Status(const SweepJob&)> run;
  // The command line that runs a job in a process of its own.
  std::function<std::vector<std::string>(const SweepJob&)> command;
};

// A job that ended, as Launcher::WaitAny reports it.
struct FinishedJob {
  size_t index = 0;
  absl::Status status;  // ok, or why the job failed
  int exit_code = 0;    // the job's exit code (its status's requested one when it ran in-process)
};

// Why a launcher of 0 slots cannot serve a sweeper that starts jobs one at a time.
inline constexpr char kCannotStartOneAtATime[] =
    "this launcher hands jobs to a scheduler and does not wait for them, so a sweeper that starts "
    "each job "
    "after the previous ones (optuna) cannot use it; use hydra/launcher=local or basic, and share "
    "the study "
    "between hosts through hydra.sweeper.storage instead";

class Launcher {
 public:
  static constexpr const char* kKind = "launcher";
  virtual ~Launcher() = default;
  // Runs the jobs; returns an error naming the failed jobs (all of them, or the first with
  // fail_fast).
  virtual absl::Status Launch(const std::vector<SweepJob>& jobs, const LaunchContext& context) = 0;
  // False for launchers that hand the jobs to a scheduler and return before they finish (slurm).
  virtual bool waits() const { return true; }

  // One job at a time, for a sweeper that starts the next job as soon as one ends (Optuna): at
  // most slots() jobs run at once; Start starts one (a launcher that runs jobs in this process
  // runs it to the end inside Start); WaitAny returns the next job to end. The defaults run the
  // job through Launch, one at a time; launchers that do not wait (slurm) refuse.
  // 0: this launcher cannot start jobs one at a time (it does not wait for them).
  virtual int slots() const { return waits() ? 1 : 0; }
  virtual absl::Status Start(const SweepJob& job, const LaunchContext& context);
  virtual absl::StatusOr<FinishedJob> WaitAny(const LaunchContext& context);

 protected:
  std::deque<FinishedJob> finished_;  // ended jobs that WaitAny has not returned yet
};

}  // namespace kiln::sweep

// The names these had in kiln::app until 0.1.0, for plugins built against them; removed in the next
// version (docs/plugins.md).
namespace kiln::app {
using sweep::FinishedJob;
using sweep::LaunchContext;
using sweep::Launcher;
using sweep::SweepJob;
}  // namespace kiln::app
