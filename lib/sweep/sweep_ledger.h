// A sweep's job ledger, SWEEP_DIR/ledger.yaml: one line per finished job (`- {job: 2, status: ok,
// seconds: 1.5, overrides: ['lr=0.1'], message: ''}`), appended with one write by whichever
// process ran the job. Re-running a sweep into the same hydra.sweep.dir skips the jobs the ledger
// records as done; at the end, a summary table of every job's final metrics (its
// test_metrics.yaml) is printed and written to SWEEP_DIR/summary.csv.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::sweep {

struct LedgerEntry {
  int64_t job = -1;
  std::string status;  // "ok" or "failed"
  double seconds = 0;
  std::vector<std::string> overrides;
  std::string message;
  std::string dir;  // the job's output directory
};

// The entries recorded so far (none when there is no ledger); a line cut short by a killed
// process is ignored.
absl::StatusOr<std::vector<LedgerEntry>> ReadLedger(const std::string& sweep_dir);
absl::Status AppendLedger(const std::string& sweep_dir, const LedgerEntry& entry);

// What identifies a job across re-runs: its overrides without the hydra.* / hydra/ ones (the
// launcher, the sweep folder, ...), which may change between runs of the same sweep.
std::vector<std::string> JobIdentity(const std::vector<std::string>& overrides);

// The last entry of each job.
std::map<int64_t, LedgerEntry> LatestByJob(const std::vector<LedgerEntry>& entries);

// The summary of jobs 0..num_jobs-1, with the final metrics each wrote to test_metrics.yaml in its
// output directory: a table (returned) and SWEEP_DIR/summary.csv.
absl::StatusOr<std::string> WriteSweepSummary(const std::string& sweep_dir,
                                              const std::vector<std::vector<std::string>>& jobs);

}  // namespace kiln::sweep
