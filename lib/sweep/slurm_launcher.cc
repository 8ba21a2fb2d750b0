// The `slurm` launcher: writes an sbatch array script for a sweep's pending jobs and submits it.
// Each array task runs one job as its own `kiln` process (the same command the `local` launcher
// starts), which records itself in the sweep's ledger; re-running the sweep afterwards skips
// the finished jobs and prints the summary. SIGUSR1 before the time limit makes the trainer
// checkpoint and exit 138, on which the task requeues itself.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/sweep/launcher.h"

namespace kiln::sweep {
namespace {

std::string ShellQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

struct SlurmOptions {
  std::string partition, time, mem;
  int64_t cpus_per_task = 0, gpus_per_task = 0, array_parallelism = 0, signal_seconds = 90;
  bool requeue = true;
  std::vector<std::string> additional_directives;
  std::string job_name = "kiln-sweep";
  bool submit = true;
  std::string sbatch = "sbatch";
};

class SlurmLauncher : public Launcher {
 public:
  explicit SlurmLauncher(SlurmOptions o) : o_(std::move(o)) {}

  bool waits() const override { return false; }

  absl::Status Launch(const std::vector<SweepJob>& jobs, const LaunchContext& context) override {
    if (jobs.empty()) return absl::OkStatus();
    std::string dir = context.sweep_dir + "/slurm";
    KILN_RETURN_IF_ERROR(MakeDirs(dir));
    // Absolute, so the script works from wherever sbatch starts it.
    if (char* real = ::realpath(dir.c_str(), nullptr)) {
      dir = real;
      std::free(real);
    }
    std::string commands;
    for (const auto& job : jobs) {
      std::vector<std::string> quoted;
      for (const auto& a : context.command(job)) quoted.push_back(ShellQuote(a));
      absl::StrAppend(&commands, absl::StrJoin(quoted, " "), "\n");
    }
    KILN_RETURN_IF_ERROR(WriteFileAtomically(dir + "/commands.txt", commands));
    std::string script = "#!/bin/bash\n";
    auto directive = [&](const std::string& d) { absl::StrAppend(&script, "#SBATCH ", d, "\n"); };
    directive("--job-name=" + o_.job_name);
    directive(
        absl::StrCat("--array=0-", jobs.size() - 1,
                     o_.array_parallelism > 0 ? absl::StrCat("%", o_.array_parallelism) : ""));
    directive("--output=" + dir + "/%A_%a.out");
    if (!o_.partition.empty()) directive("--partition=" + o_.partition);
    if (!o_.time.empty()) directive("--time=" + o_.time);
    if (!o_.mem.empty()) directive("--mem=" + o_.mem);
    if (o_.cpus_per_task > 0) directive(absl::StrCat("--cpus-per-task=", o_.cpus_per_task));
    if (o_.gpus_per_task > 0) directive(absl::StrCat("--gpus-per-task=", o_.gpus_per_task));
    if (o_.signal_seconds > 0) directive(absl::StrCat("--signal=USR1@", o_.signal_seconds));
    if (o_.requeue) directive("--requeue");
    for (const auto& d : o_.additional_directives) directive(d);
    absl::StrAppend(&script,
                    "# One sweep job per array task: line SLURM_ARRAY_TASK_ID+1 of commands.txt.\n"
                    "set -uo pipefail\n"
                    "line=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" ",
                    ShellQuote(dir + "/commands.txt"), ")\n",
                    "rc=0\n"
                    "eval \"$line\" || rc=$?\n");
    if (o_.requeue) {
      absl::StrAppend(&script,
                      "# 138: preempted (SIGUSR1) after writing last.ckpt; run the task again.\n"
                      "if [ \"$rc\" -eq 138 ] && command -v scontrol >/dev/null; then\n"
                      "  scontrol requeue \"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"\n"
                      "fi\n");
    }
    absl::StrAppend(&script, "exit \"$rc\"\n");
    std::string path = dir + "/array.sbatch";
    KILN_RETURN_IF_ERROR(WriteFileAtomically(path, script));
    ::chmod(path.c_str(), 0755);
    if (!o_.submit) {
      Logger::Instance().Info(absl::StrCat("wrote ", path, " for ", jobs.size(),
                                           " jobs; submit it with: ", o_.sbatch, " ", path));
      return absl::OkStatus();
    }
    std::string command = absl::StrCat(o_.sbatch, " --parsable ", ShellQuote(path), " 2>&1");
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot run ", o_.sbatch));
    std::string out;
    char buf[256];
    while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
    int rc = ::pclose(pipe);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (rc != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(o_.sbatch, " failed (", out.empty() ? "no output" : out, "); the script is ",
                       path, "; launcher.submit=false only writes it"));
    }
    Logger::Instance().Info(
        absl::StrCat("submitted ", jobs.size(), " jobs as SLURM array job ", out, " (", path,
                     "); run the same sweep again once they are done for its summary"));
    return absl::OkStatus();
  }

 private:
  SlurmOptions o_;
};

KILN_REGISTER_BOUND(
    Launcher, "slurm", "Submits the jobs as a SLURM array (sbatch), one kiln process per task",
    OptionBinding<SlurmOptions>()
        .Field("partition", &SlurmOptions::partition, "--partition (empty: the cluster's default)")
        .Field("time", &SlurmOptions::time, "--time limit, e.g. 04:00:00")
        .Field("mem", &SlurmOptions::mem, "--mem, e.g. 16G")
        .Field("cpus_per_task", &SlurmOptions::cpus_per_task, "--cpus-per-task (0: not set)",
               AtLeast(0))
        .Field("gpus_per_task", &SlurmOptions::gpus_per_task, "--gpus-per-task (0: not set)",
               AtLeast(0))
        .Field("array_parallelism", &SlurmOptions::array_parallelism,
               "at most this many tasks at once (0: no limit)", AtLeast(0))
        .Field("signal_seconds", &SlurmOptions::signal_seconds,
               "send SIGUSR1 this long before the time limit (0: not set)", AtLeast(0))
        .Field("requeue", &SlurmOptions::requeue,
               "requeue a task whose job was preempted (exit 138)")
        .Field("additional_directives", &SlurmOptions::additional_directives,
               "more #SBATCH lines, e.g. [--qos=high]")
        .Field("job_name", &SlurmOptions::job_name, "--job-name", NonEmpty())
        .Field("submit", &SlurmOptions::submit, "run sbatch; false only writes the script")
        .Field("sbatch", &SlurmOptions::sbatch, "the sbatch command", NonEmpty()),
    [](const SlurmOptions& o) -> absl::StatusOr<std::shared_ptr<Launcher>> {
      return std::make_shared<SlurmLauncher>(o);
    });

}  // namespace
}  // namespace kiln::sweep
