#include "lib/sweep/sweep_session.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/directory_lock.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/base/stop_signals.h"
#include "lib/config/repository.h"
#include "lib/logging/logger.h"
#include "lib/sweep/sweep_ledger.h"

namespace kiln::sweep {
namespace {

class Session : public SweepSession {
 public:
  explicit Session(SweepSetup setup) : setup_(std::move(setup)) {
    setup_.context.sweep_dir = setup_.sweep_dir;
    setup_.context.fail_fast = setup_.fail_fast;
  }

  const std::vector<config::Override>& arguments() const override { return setup_.arguments; }
  const config::ConfigRepository& repository() const override { return *setup_.repo; }
  bool fail_fast() const override { return setup_.fail_fast; }

  absl::StatusOr<BatchResult> Launch(const std::vector<std::vector<std::string>>& jobs) override {
    BatchResult result;
    if (setup_.dry_run) {
      for (const auto& job : jobs) {
        setup_.print(absl::StrCat(absl::StrJoin(job, " "), "\n"));
        result.jobs.push_back(
            {next_index_++, job, absl::UnavailableError("not run (--dry-run)"), ""});
      }
      return result;
    }
    if (StopSignals::Received() != 0)
      return absl::CancelledError("the sweep is stopping: no new job");
    KILN_RETURN_IF_ERROR(Prepare());
    std::vector<SweepJob> pending;
    size_t first = next_index_;
    for (const auto& overrides : jobs) {
      size_t index = next_index_++;
      auto it = done_.find(static_cast<int64_t>(index));
      if (it != done_.end() && JobIdentity(it->second.overrides) != JobIdentity(overrides)) {
        return absl::FailedPreconditionError(absl::StrCat(
            setup_.sweep_dir, "/ledger.yaml records job ", index, " as '",
            absl::StrJoin(JobIdentity(it->second.overrides), " "), "', but this sweep's job ",
            index, " is '", absl::StrJoin(JobIdentity(overrides), " "),
            "': it holds another sweep; choose another hydra.sweep.dir"));
      }
      if (it == done_.end() || it->second.status != "ok") pending.push_back({index, overrides});
      all_jobs_.push_back(overrides);
    }
    if (pending.size() < jobs.size()) {
      Logger::Instance().Info(absl::StrCat("resuming the sweep in ", setup_.sweep_dir, ": ",
                                           jobs.size() - pending.size(), " of ", jobs.size(),
                                           " jobs are done, running ", pending.size()));
    }
    if (!pending.empty()) result.status = setup_.launcher->Launch(pending, setup_.context);
    // Each job's outcome, as the process that ran it recorded it.
    auto ledger = ReadLedger(setup_.sweep_dir);
    if (!ledger.ok()) return ledger.status();
    auto latest = LatestByJob(*ledger);
    for (size_t i = 0; i < jobs.size(); ++i) {
      JobResult job{first + i, jobs[i], absl::OkStatus(), ""};
      auto it = latest.find(static_cast<int64_t>(job.index));
      if (it == latest.end()) {
        job.status = absl::UnavailableError("no result recorded yet");
      } else {
        job.dir = it->second.dir;
        if (it->second.status != "ok") job.status = absl::InternalError(it->second.message);
      }
      result.jobs.push_back(std::move(job));
    }
    return result;
  }

  int slots() const override { return setup_.launcher == nullptr ? 1 : setup_.launcher->slots(); }

  absl::Status Start(size_t index, const std::vector<std::string>& overrides) override {
    if (setup_.dry_run) return absl::FailedPreconditionError("no job starts under --dry-run");
    if (StopSignals::Received() != 0)
      return absl::CancelledError("the sweep is stopping: no new job");
    KILN_RETURN_IF_ERROR(Prepare());
    started_[index] = overrides;
    return setup_.launcher->Start({index, overrides}, setup_.context);
  }

  absl::StatusOr<JobResult> WaitAny() override {
    KILN_ASSIGN_OR_RETURN(FinishedJob done, setup_.launcher->WaitAny(setup_.context));
    JobResult job{done.index, started_[done.index], done.status, "", done.exit_code};
    started_.erase(done.index);
    // The job's folder, as the process that ran it recorded it in the ledger.
    KILN_ASSIGN_OR_RETURN(auto ledger, ReadLedger(setup_.sweep_dir));
    for (auto it = ledger.rbegin(); it != ledger.rend(); ++it) {
      if (it->job == static_cast<int64_t>(done.index)) {
        job.dir = it->dir;
        break;
      }
    }
    return job;
  }

  bool dry_run() const override { return setup_.dry_run; }
  const std::string& sweep_dir() const override { return setup_.sweep_dir; }
  const config::Node& config() const override { return *setup_.config; }
  void Print(const std::string& text) const override { setup_.print(text); }

  // The summary of every job launched so far (when the launcher waited for them).
  absl::Status Finish() {
    // Jobs started one at a time are summarized by their sweeper (it knows what they were for).
    if (!prepared_ || !setup_.launcher->waits() || all_jobs_.empty()) return absl::OkStatus();
    auto summary = WriteSweepSummary(setup_.sweep_dir, all_jobs_);
    if (!summary.ok()) return summary.status();
    Logger::Instance().Info(absl::StrCat("sweep summary (", setup_.sweep_dir, "/summary.csv):"));
    for (absl::string_view line : absl::StrSplit(*summary, '\n', absl::SkipEmpty())) {
      Logger::Instance().Info(absl::StrCat("  ", line));
    }
    return absl::OkStatus();
  }

 private:
  // The sweep folder, its multirun.yaml and what its ledger records, before the first job.
  absl::Status Prepare() {
    if (prepared_) return absl::OkStatus();
    KILN_RETURN_IF_ERROR(MakeDirs(setup_.sweep_dir));
    // One sweep at a time in a folder (its jobs lock their own subfolders); held until the
    // session ends, after the summary.
    KILN_ASSIGN_OR_RETURN(
        lock_, DirectoryLock::Acquire(setup_.sweep_dir, "sweep directory (hydra.sweep.dir)"));
    KILN_RETURN_IF_ERROR(
        WriteFileAtomically(setup_.sweep_dir + "/multirun.yaml", setup_.multirun_yaml));
    auto ledger = ReadLedger(setup_.sweep_dir);
    if (!ledger.ok()) return ledger.status();
    done_ = LatestByJob(*ledger);
    prepared_ = true;
    return absl::OkStatus();
  }

  SweepSetup setup_;
  DirectoryLock lock_;
  bool prepared_ = false;
  size_t next_index_ = 0;
  std::map<int64_t, LedgerEntry> done_;                 // the ledger as the sweep found it
  std::vector<std::vector<std::string>> all_jobs_;      // every job launched, by index
  std::map<size_t, std::vector<std::string>> started_;  // jobs started one at a time, still running
};

}  // namespace

absl::Status RunSweep(Sweeper& sweeper, SweepSetup setup) {
  // SIGINT/SIGTERM: no job starts after it, the running ones stop (with checkpoints), and the sweep
  // exits 130/143; re-running it runs what its ledger does not record as done.
  StopSignals stop_signals;
  const std::string sweep_dir = setup.sweep_dir;
  Session session(std::move(setup));
  absl::Status status = sweeper.Sweep(session);
  if (StopSignals::Received() != 0) {
    auto ledger = ReadLedger(sweep_dir);
    size_t done = 0;
    if (ledger.ok()) {
      for (const auto& [job, entry] : LatestByJob(*ledger)) done += entry.status == "ok" ? 1 : 0;
    }
    return CheckStopSignal(absl::StrCat("with ", done, " job(s) of the sweep in ", sweep_dir,
                                        " done; run the same command again for the rest"));
  }
  absl::Status summary = session.Finish();
  return status.ok() ? summary : status;
}

}  // namespace kiln::sweep
