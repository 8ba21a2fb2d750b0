#include "lib/sweep/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"
#include "lib/base/stop_signals.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/run/command.h"
#include "lib/run/internal/spawn.h"

namespace kiln::sweep {
// Run in-process (or handed to a scheduler) inside Start; WaitAny then returns it.
absl::Status Launcher::Start(const SweepJob& job, const LaunchContext& context) {
  if (!waits()) return absl::FailedPreconditionError(kCannotStartOneAtATime);
  absl::Status status = Launch({job}, context);
  finished_.push_back({job.index, status, run::ExitCodeFor(status)});
  return absl::OkStatus();
}

absl::StatusOr<FinishedJob> Launcher::WaitAny(const LaunchContext&) {
  if (finished_.empty()) return absl::FailedPreconditionError("WaitAny: no job is running");
  FinishedJob job = std::move(finished_.front());
  finished_.pop_front();
  return job;
}

namespace {

absl::Status Summarize(const std::vector<std::string>& failures, size_t total) {
  if (failures.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(failures.size(), " of ", total,
                                          " jobs failed: ", absl::StrJoin(failures, "; ")));
}

class BasicLauncher : public Launcher {
 public:
  absl::Status Launch(const std::vector<SweepJob>& jobs, const LaunchContext& context) override {
    Logger::Instance().Info(absl::StrCat("Launching ", jobs.size(), " jobs locally"));
    std::vector<std::string> failures;
    for (const auto& job : jobs) {
      if (StopSignals::Received() != 0) break;  // RunSweep says what was left
      Logger::Instance().Info(
          absl::StrCat("\t#", job.index, " : ", absl::StrJoin(job.overrides, " ")));
      absl::Status status = context.run(job);
      if (status.ok()) continue;
      failures.push_back(absl::StrCat("job #", job.index, ": ", status.message()));
      if (context.fail_fast) break;
    }
    return Summarize(failures, jobs.size());
  }

  absl::Status Start(const SweepJob& job, const LaunchContext& context) override {
    Logger::Instance().Info(
        absl::StrCat("\t#", job.index, " : ", absl::StrJoin(job.overrides, " ")));
    absl::Status status = context.run(job);
    finished_.push_back({job.index, status, run::ExitCodeFor(status)});
    return absl::OkStatus();
  }
};

KILN_REGISTER_BOUND(Launcher, "basic",
                    "Runs the jobs of a multirun one after another in this process",
                    OptionBinding<NoOptions>(),
                    [](const NoOptions&) -> absl::StatusOr<std::shared_ptr<Launcher>> {
                      return std::make_shared<BasicLauncher>();
                    });

// Up to n_jobs `kiln` processes at once; each job's output goes to its own log file.
class LocalLauncher : public Launcher {
 public:
  explicit LocalLauncher(int n_jobs) : n_jobs_(n_jobs) {}

  int slots() const override { return n_jobs_; }

  absl::Status Launch(const std::vector<SweepJob>& jobs, const LaunchContext& context) override {
    Logger::Instance().Info(
        absl::StrCat("Launching ", jobs.size(), " jobs, ", n_jobs_, " at a time"));
    std::vector<std::string> failures;
    size_t next = 0;
    bool stop = false;
    while ((next < jobs.size() && !stop) || !running_.empty()) {
      if (StopSignals::Received() != 0) stop = true;  // no new job; the running ones stop (WaitAny)
      while (!stop && next < jobs.size() && static_cast<int>(running_.size()) < n_jobs_) {
        const SweepJob& job = jobs[next++];
        if (absl::Status st = Start(job, context); !st.ok()) {
          failures.push_back(absl::StrCat("job #", job.index, ": ", st.message()));
          stop = context.fail_fast;
        }
      }
      if (running_.empty()) break;
      auto done = WaitAny(context);
      if (!done.ok()) return done.status();
      if (done->status.ok()) continue;
      failures.push_back(std::string(done->status.message()));
      if (context.fail_fast) stop = true;
    }
    return Summarize(failures, jobs.size());
  }

  absl::Status Start(const SweepJob& job, const LaunchContext& context) override {
    Logger::Instance().Info(
        absl::StrCat("\t#", job.index, " : ", absl::StrJoin(job.overrides, " ")));
    // A job outlives neither a killed sweep nor a sweep that exits on an error: it checkpoints
    // and stops, as on any SIGTERM.
    run::SpawnOptions spawn;
    spawn.stop_with_parent = true;
    auto pid = run::SpawnProcess(context.command(job), spawn);
    if (!pid.ok()) return pid.status();
    running_[*pid] = job.index;
    return absl::OkStatus();
  }

  // Waits for any child, and skips those that are not this launcher's jobs (the Optuna helper).
  absl::StatusOr<FinishedJob> WaitAny(const LaunchContext& context) override {
    if (running_.empty()) return absl::FailedPreconditionError("WaitAny: no job is running");
    while (true) {
      // A stop signal to the sweep (SIGTERM to it alone, or SIGINT from a terminal, which its jobs
      // get too) goes to every running job once: each stops after its step with a checkpoint.
      if (int signal = StopSignals::Received(); signal != 0 && !forwarded_) {
        forwarded_ = true;
        for (const auto& [job_pid, index] : running_)
          ::kill(job_pid, signal == SIGUSR1 ? SIGUSR1 : SIGTERM);
      }
      int wstatus = 0;
      pid_t pid = ::waitpid(-1, &wstatus, WNOHANG);
      if (pid == 0) {  // polled, so that a signal between two waits is not missed
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (pid < 0) {
        if (errno == EINTR) continue;
        return absl::InternalError(absl::StrCat("waiting for jobs: ", std::strerror(errno)));
      }
      auto it = running_.find(pid);
      if (it == running_.end()) continue;
      FinishedJob done{it->second, absl::OkStatus(), run::ExitCodeOf(wstatus)};
      running_.erase(it);
      if (done.exit_code != 0) {
        done.status =
            absl::InternalError(absl::StrCat("job #", done.index, " ", run::DescribeExit(wstatus),
                                             " (see ", context.sweep_dir, "/", done.index, ")"));
      }
      return done;
    }
  }

 private:
  int n_jobs_;
  std::map<pid_t, size_t> running_;  // job processes by pid: the job's index
  bool forwarded_ = false;           // a stop signal was passed on to the running jobs
};

struct LocalLauncherOptions {
  int64_t n_jobs = -1;
};

KILN_REGISTER_BOUND(Launcher, "local",
                    "Runs up to n_jobs jobs at once, each in a kiln process of its own",
                    OptionBinding<LocalLauncherOptions>().Field(
                        "n_jobs", &LocalLauncherOptions::n_jobs, "jobs at once; -1: one per core",
                        OptionCheck{"-1 or at least 1",
                                    [](const config::Node& n) {
                                      return n.kind() == config::NodeKind::kInt &&
                                             (n.as_int() == -1 || n.as_int() >= 1);
                                    }}),
                    [](const LocalLauncherOptions& o) -> absl::StatusOr<std::shared_ptr<Launcher>> {
                      int64_t n = o.n_jobs == -1 ? std::max(1u, std::thread::hardware_concurrency())
                                                 : o.n_jobs;
                      return std::make_shared<LocalLauncher>(static_cast<int>(n));
                    });

}  // namespace
}  // namespace kiln::sweep
