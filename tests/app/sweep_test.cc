// Multirun sweeps through the real binary: the `local` launcher runs jobs in processes of their
// own; a sweep killed midway and re-run into the same folder runs only the jobs its ledger does
// not record as done; --fail-fast; the summary table of every job's final metrics.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::RunProcess;
using testing::TempDir;

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n'))
    n += absl::StrContains(line, needle) ? 1 : 0;
  return n;
}

std::vector<std::string> BlobsSweep(const std::string& sweep_dir) {
  return {KILN_BINARY,
          "train",
          "-m",
          "--plugin",
          BLOBS_PLUGIN,
          "experiment=blobs",
          "trainer.num_threads=1",
          "data.train_size=30000",
          "trainer.max_epochs=2",
          "hydra/launcher=local",
          "hydra.launcher.n_jobs=2",
          "hydra.sweep.dir=" + sweep_dir,
          "data.seed=0,1,2,3"};
}

TEST(Sweep, KilledMidwayAndRerunRunsOnlyTheMissingJobs) {
  TempDir dir;
  std::string sweep = dir.path() + "/sweep";
  std::vector<std::string> argv = BlobsSweep(sweep);
  pid_t pid =
      testing::StartInOwnGroup(argv);  // the launcher and its job processes, killed together below
  ASSERT_GT(pid, 0);
  // Kill everything as soon as the first job is recorded as done.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (CountLines(
             FileExists(sweep + "/ledger.yaml") ? testing::ReadFile(sweep + "/ledger.yaml") : "",
             "status: ok") == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  int done = CountLines(testing::ReadFile(sweep + "/ledger.yaml"), "status: ok");
  ASSERT_GE(done, 1);
  ASSERT_LT(done, 4)
      << "every job finished before the kill; the jobs are too short for this machine";

  auto rerun = RunProcess(BlobsSweep(sweep));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_TRUE(
      absl::StrContains(rerun.err, "resuming the sweep in " + sweep + ": " + std::to_string(done) +
                                       " of 4 jobs are done, running " + std::to_string(4 - done)))
      << rerun.err;
  std::string ledger = testing::ReadFile(sweep + "/ledger.yaml");
  EXPECT_EQ(CountLines(ledger, "status: ok"), 4)
      << ledger;  // each job ran to completion exactly once
  for (int job = 0; job < 4; ++job) {
    EXPECT_EQ(CountLines(ledger, "{job: " + std::to_string(job) + ", status: ok"), 1) << ledger;
    EXPECT_TRUE(FileExists(sweep + "/" + std::to_string(job) + "/test_metrics.yaml")) << job;
  }
  std::string summary = testing::ReadFile(sweep + "/summary.csv");
  std::vector<std::string> rows = absl::StrSplit(summary, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 5u) << summary;
  EXPECT_TRUE(absl::StartsWith(rows[0], "job,status,seconds,overrides,")) << summary;
  EXPECT_TRUE(absl::StrContains(rows[0], "test/acc")) << summary;
  EXPECT_TRUE(absl::StartsWith(rows[3], "2,ok,")) << summary;
  EXPECT_TRUE(absl::StrContains(rows[3], "data.seed=2")) << summary;
  // A third run finds everything done.
  auto again = RunProcess(BlobsSweep(sweep));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(absl::StrContains(again.err, "4 of 4 jobs are done, running 0")) << again.err;
}

TEST(Sweep, JobsOfAKilledSweepCheckpointAndStop) {
  TempDir dir;
  std::string sweep = dir.path() + "/sweep";
  std::vector<std::string> argv = BlobsSweep(sweep);
  argv.push_back("trainer.max_epochs=50");  // the jobs are still training when the sweep dies
  pid_t pid = testing::StartInOwnGroup(argv);
  ASSERT_GT(pid, 0);
  // Wait until both first jobs have started training.
  auto training = [&](int job) {
    std::string log = sweep + "/" + std::to_string(job) + "/train.log";
    return FileExists(log) && absl::StrContains(testing::ReadFile(log), "training on");
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!(training(0) && training(1)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(training(0) && training(1)) << "the jobs did not start";
  // The sweep alone is killed; its jobs get SIGTERM from Linux when their parent dies, and each
  // writes a checkpoint and exits.
  auto left = testing::KillLeaderAndWaitForGroup(pid, 60);
  EXPECT_TRUE(left.empty()) << left.size() << " job processes outlived their sweep";
  if (!left.empty()) kill(-pid, SIGKILL);
  for (int job : {0, 1}) {
    std::string run = sweep + "/" + std::to_string(job);
    EXPECT_TRUE(FileExists(run + "/checkpoints/last.ckpt"))
        << job;  // written on SIGTERM, mid-training
    EXPECT_FALSE(FileExists(run + "/test_metrics.yaml")) << job;
  }
  EXPECT_FALSE(FileExists(sweep + "/2/train.log"));  // no job starts after the sweep is gone
}

class ComposeSweep : public ::testing::Test {
 protected:
  void SetUp() override { dir_.Write("conf/train.yaml", "defaults:\n  - _self_\nx: 1\ny: 0\n"); }
  testing::ProcessResult Kiln(std::vector<std::string> extra) {
    std::vector<std::string> argv = {KILN_BINARY,
                                     "compose",
                                     "-m",
                                     "--config-path",
                                     dir_.path() + "/conf",
                                     "hydra.sweep.dir=" + dir_.path() + "/sweep"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv, {}, dir_.path());
  }
  TempDir dir_;
};

TEST_F(ComposeSweep, AFailedJobDoesNotStopTheOthersUnlessFailFast) {
  // Job 1's value does not resolve.
  auto r = Kiln({"y=1,${oops},3"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "x: 1\n'y': 1\nx: 1\n'y': 3\n");
  EXPECT_TRUE(absl::StrContains(r.err, "1 of 3 jobs failed: job #1:")) << r.err;
  std::string ledger = testing::ReadFile(dir_.path() + "/sweep/ledger.yaml");
  EXPECT_EQ(CountLines(ledger, "status: failed"), 1) << ledger;
  EXPECT_EQ(CountLines(ledger, "status: ok"), 2) << ledger;
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(dir_.path() + "/sweep/summary.csv"), "1,failed,"))
      << ledger;

  TempDir other;
  auto fast = RunProcess(
      {KILN_BINARY, "compose", "-m", "--fail-fast", "--config-path", dir_.path() + "/conf",
       "hydra.sweep.dir=" + other.path() + "/sweep", "y=1,${oops},3"},
      {}, dir_.path());
  EXPECT_EQ(fast.exit_code, 1) << fast.err;
  EXPECT_EQ(fast.out, "x: 1\n'y': 1\n");  // job 2 never started
}

TEST_F(ComposeSweep, ReRunningIntoAFolderOfAnotherSweepIsRefused) {
  ASSERT_EQ(Kiln({"x=1,2"}).exit_code, 0);
  auto r = Kiln({"x=1,3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "records job 1 as 'x=2', but this sweep's job 1 is 'x=3'"))
      << r.err;
}

// Hydra runs a config that sets hydra.mode: MULTIRUN as a multirun without -m (an hparams_search
// file does); without that, a sweep on the command line still asks for -m.
TEST_F(ComposeSweep, AConfigThatSetsMultirunModeSweepsWithoutDashM) {
  dir_.Write("conf/search/grid.yaml", "# @package _global_\nhydra:\n  mode: MULTIRUN\n");
  std::vector<std::string> argv = {KILN_BINARY,
                                   "compose",
                                   "--config-path",
                                   dir_.path() + "/conf",
                                   "hydra.sweep.dir=" + dir_.path() + "/sweep",
                                   "x=1,2"};
  auto plain = RunProcess(argv, {}, dir_.path());
  EXPECT_EQ(plain.exit_code, 2) << plain.err;
  EXPECT_TRUE(absl::StrContains(plain.err, "to sweep over it add --multirun (-m)")) << plain.err;
  argv.push_back("+search=grid");
  auto r = RunProcess(argv, {}, dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "x: 1\n'y': 0\nx: 2\n'y': 0\n");
  EXPECT_EQ(CountLines(testing::ReadFile(dir_.path() + "/sweep/ledger.yaml"), "status: ok"), 2);
}

TEST_F(ComposeSweep, LocalLauncherRunsEveryJobInItsOwnProcess) {
  auto r = Kiln({"hydra/launcher=local", "hydra.launcher.n_jobs=3", "x=1,2,3,4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int job = 0; job < 4; ++job) {
    std::string config =
        testing::ReadFile(dir_.path() + "/sweep/" + std::to_string(job) + "/.hydra/config.yaml");
    EXPECT_EQ(config, "x: " + std::to_string(job + 1) + "\n'y': 0\n");
    std::string hydra =
        testing::ReadFile(dir_.path() + "/sweep/" + std::to_string(job) + "/.hydra/hydra.yaml");
    EXPECT_TRUE(absl::StrContains(hydra, "num: " + std::to_string(job))) << hydra;
    EXPECT_TRUE(absl::StrContains(hydra, "dir: " + dir_.path() + "/sweep")) << hydra;
  }
  EXPECT_EQ(CountLines(testing::ReadFile(dir_.path() + "/sweep/ledger.yaml"), "status: ok"), 4);
}

// With no cluster here, a stand-in sbatch records how it was called; the generated array script
// is then run as SLURM would run task 1, and that job lands in the ledger like any other.
TEST_F(ComposeSweep, SlurmLauncherWritesAndSubmitsAnArrayScript) {
  dir_.Write("bin/sbatch", "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\necho 4242\n");
  ASSERT_EQ(chmod((dir_.path() + "/bin/sbatch").c_str(), 0755), 0);
  std::string path = dir_.path() + "/bin:" + std::getenv("PATH");
  std::vector<std::string> argv = {KILN_BINARY,
                                   "compose",
                                   "-m",
                                   "--config-path",
                                   dir_.path() + "/conf",
                                   "hydra.sweep.dir=" + dir_.path() + "/sweep",
                                   "hydra/launcher=slurm",
                                   "hydra.launcher.array_parallelism=2",
                                   "hydra.launcher.time=00:10:00",
                                   "x=1,2,3"};
  auto r = RunProcess(argv, {{"PATH", path}}, dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "submitted 3 jobs as SLURM array job 4242")) << r.err;
  std::string script_path = dir_.path() + "/sweep/slurm/array.sbatch";
  EXPECT_EQ(testing::ReadFile(dir_.path() + "/bin/args"), "--parsable " + script_path + "\n");
  std::string script = testing::ReadFile(script_path);
  for (const char* line :
       {"#SBATCH --array=0-2%2\n", "#SBATCH --time=00:10:00\n", "#SBATCH --signal=USR1@90\n",
        "#SBATCH --requeue\n", "scontrol requeue"}) {
    EXPECT_TRUE(absl::StrContains(script, line)) << line << " missing from\n" << script;
  }
  std::string commands = testing::ReadFile(dir_.path() + "/sweep/slurm/commands.txt");
  EXPECT_EQ(CountLines(commands, "--multirun-job="), 3) << commands;
  EXPECT_TRUE(
      absl::StrContains(commands, "'--multirun-job=1' '--sweep-dir=" + dir_.path() + "/sweep'"))
      << commands;

  auto task = RunProcess({"/bin/bash", script_path}, {{"SLURM_ARRAY_TASK_ID", "1"}}, dir_.path());
  ASSERT_EQ(task.exit_code, 0) << task.err;
  EXPECT_EQ(task.out, "x: 2\n'y': 0\n");
  std::string ledger = testing::ReadFile(dir_.path() + "/sweep/ledger.yaml");
  EXPECT_EQ(CountLines(ledger, "{job: 1, status: ok"), 1) << ledger;
  // The rest of the sweep, here with the basic launcher: job 1 is done.
  auto rest = Kiln({"x=1,2,3"});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(rest.out, "x: 1\n'y': 0\nx: 3\n'y': 0\n");
  EXPECT_TRUE(absl::StrContains(rest.err, "1 of 3 jobs are done, running 2")) << rest.err;
}

}  // namespace
}  // namespace kiln
