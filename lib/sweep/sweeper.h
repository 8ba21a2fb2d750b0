// Sweepers decide which jobs a multirun runs; launchers run them (Hydra's split). A sweeper
// gets a SweepSession and asks it to launch batches of jobs, each a list of overrides; it may
// plan everything up front (`basic`, the grid) or ask for jobs one batch at a time from what
// earlier batches returned; or start jobs one at a time, each as a slot frees (Optuna). The session
// owns the sweep folder, the ledger that lets a re-run skip the jobs already done, the launcher and
// the summary. Plugins register more sweepers under the same kind
// (`registrar.Add<kiln::sweep::Sweeper>`).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/config/node.h"
#include "lib/config/override.h"
#include "lib/config/repository.h"

namespace kiln::sweep {

// A launched job as its ledger entry records it.
struct JobResult {
  size_t index = 0;                    // the job's number in the sweep (its folder name)
  std::vector<std::string> overrides;  // the job's own overrides
  // ok; the job's error; or kUnavailable while a scheduler (slurm) has not run it yet.
  absl::Status status;
  std::string dir;    // the job's output directory ("" when it did not get one)
  int exit_code = 0;  // how the job's process ended (Start/WaitAny only)
};

// What one Launch call did: the launcher's status (naming the failed jobs) and each job's result.
struct BatchResult {
  absl::Status status;
  std::vector<JobResult> jobs;
};

class SweepSession {
 public:
  virtual ~SweepSession() = default;
  // The command line's overrides, sweeps (`a=1,2`, `range(...)`, ...) included.
  virtual const std::vector<config::Override>& arguments() const = 0;
  // Where group options (`model=glob(*)`) are looked up.
  virtual const config::ConfigRepository& repository() const = 0;
  // True under --fail-fast: a sweeper stops asking for jobs after a failed one.
  virtual bool fail_fast() const = 0;
  // Runs a batch through the launcher; its jobs are numbered after the previous batches'. A job
  // that the sweep folder's ledger records as done is not run again, and its recorded result is
  // returned. Under --dry-run the jobs are printed, one line each, and none runs.
  virtual absl::StatusOr<BatchResult> Launch(const std::vector<std::vector<std::string>>& jobs) = 0;

  // One job at a time, for a sweeper that starts the next job as soon as a slot frees: up to
  // slots() jobs run at once (the launcher's parallelism); Start starts job `index` (numbered by
  // the sweeper, e.g. Optuna's trial number) and WaitAny returns the next job to end. A launcher
  // that runs jobs in this process runs the job inside Start. Not under --dry-run.
  // 0 for a launcher that cannot (one that hands jobs to a scheduler and does not wait: slurm).
  virtual int slots() const = 0;
  virtual absl::Status Start(size_t index, const std::vector<std::string>& overrides) = 0;
  virtual absl::StatusOr<JobResult> WaitAny() = 0;

  virtual bool dry_run() const = 0;
  // The sweep folder (hydra.sweep.dir; "" under --dry-run).
  virtual const std::string& sweep_dir() const = 0;
  // The sweep's composed config (multirun.yaml's, interpolations unresolved).
  virtual const config::Node& config() const = 0;
  // Standard output (a dry-run plan).
  virtual void Print(const std::string& text) const = 0;
};

class Sweeper {
 public:
  static constexpr const char* kKind = "sweeper";
  virtual ~Sweeper() = default;
  // Runs the sweep; returns the error of the failed jobs (as the launcher reported them).
  virtual absl::Status Sweep(SweepSession& session) = 0;
};

}  // namespace kiln::sweep

// The names these had in kiln::app until 0.1.0, for plugins built against them; removed in the next
// version (docs/plugins.md).
namespace kiln::app {
using sweep::BatchResult;
using sweep::JobResult;
using sweep::Sweeper;
using sweep::SweepSession;
}  // namespace kiln::app
