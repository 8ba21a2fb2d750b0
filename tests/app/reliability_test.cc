// Reliability of the real binary against other processes and a failing disk (docs/reliability.md):
// run and sweep directories are locked (a second kiln refuses in one line naming the holder's
// pid; a holder killed with SIGKILL leaves nothing that blocks); checkpoint, metrics, log, run
// directory and export writes under ENOSPC, EIO and a read-only folder, injected by the
// LD_PRELOAD shim tests/support/fault_injection.cc, and EFBIG under a file size limit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/directory_lock.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

// `kiln train -m` of the blobs experiment, two epochs of 40,000 samples per job, on the local
// launcher two jobs at a time, one job per data.seed in `seeds`.
std::vector<std::string> BlobsSweepOfTwoEpochs(const std::string& sweep_dir,
                                               const std::string& seeds) {
  return {KILN_BINARY,
          "train",
          "-m",
          "--plugin",
          BLOBS_PLUGIN,
          "experiment=blobs",
          "trainer.num_threads=1",
          "data.train_size=40000",
          "trainer.max_epochs=2",
          "hydra/launcher=local",
          "hydra.launcher.n_jobs=2",
          "hydra.sweep.dir=" + sweep_dir,
          "data.seed=" + seeds};
}

using testing::FileExists;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;

std::vector<std::string> Lines(const std::string& text, const std::string& needle) {
  std::vector<std::string> found;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, needle)) found.emplace_back(line);
  }
  return found;
}

// Starts `argv` in a process group of its own (StartInOwnGroup) with its stderr going to the
// file `err`: through `sh -c 'exec ...'`, so the pid is the program's own.
pid_t StartWithStderrTo(const std::vector<std::string>& argv, const std::string& err) {
  std::vector<std::string> shell = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>" + err};
  shell.insert(shell.end(), argv.begin(), argv.end());
  return testing::StartInOwnGroup(shell);
}

// A fast training job (the gaussian_blobs plugin) in `run`, checkpointing every epoch.
std::vector<std::string> Train(const std::string& run, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {KILN_BINARY,
                                   "train",
                                   "--plugin",
                                   BLOBS_PLUGIN,
                                   "experiment=blobs",
                                   "trainer.num_threads=1",
                                   "callbacks=default",
                                   "callbacks.early_stopping=null",
                                   "hydra.run.dir=" + run};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Waits until DIR/.kiln.lock names `pid` (the holder took the lock); false after a minute.
bool WaitForLock(const std::string& dir, pid_t pid) {
  std::string path = dir + "/" + DirectoryLock::kFileName;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    int64_t holder = 0;
    if (FileExists(path) && absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)), &holder) &&
        holder == pid) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool WaitForFile(const std::string& path) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!FileExists(path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return FileExists(path);
}

// The refusal: exit code 2 and one line, naming the folder and the holder's pid.
void ExpectRefused(const testing::ProcessResult& r, const std::string& dir, pid_t holder) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  auto errors = Lines(r.err, "kiln: error: ");
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_TRUE(absl::StrContains(errors[0], dir + " is in use: another kiln process (pid " +
                                               std::to_string(holder) + ") holds its lock " + dir +
                                               "/.kiln.lock"))
      << errors[0];
}

// A process a test starts in its own group (a `kiln serve`, a sweep) ends when the test's process
// is killed (ctest's timeout, Ctrl-C), instead of living on with its port and CPU.
TEST(TestProcesses, OneStartedInItsOwnGroupEndsWithTheTest) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t test = ::fork();
  ASSERT_GE(test, 0);
  if (test == 0) {  // the "test": starts a long sleep in its own group, says its pid, waits
    ::close(fds[0]);
    pid_t sleeper = testing::StartInOwnGroup({"/bin/sleep", "1000"});
    ssize_t written = ::write(fds[1], &sleeper, sizeof(sleeper));
    (void)written;
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t sleeper = -1;
  ASSERT_EQ(::read(fds[0], &sleeper, sizeof(sleeper)), static_cast<ssize_t>(sizeof(sleeper)));
  ::close(fds[0]);
  ASSERT_GT(sleeper, 0);
  EXPECT_EQ(testing::ProcessesInGroup(sleeper), std::vector<pid_t>{sleeper});
  ::kill(test, SIGKILL);
  ::waitpid(test, nullptr, 0);
  std::vector<pid_t> alive = testing::ProcessesInGroup(sleeper);
  for (int i = 0; i < 100 && !alive.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    alive = testing::ProcessesInGroup(sleeper);
  }
  EXPECT_TRUE(alive.empty()) << "the sleep started by the killed test still runs";
  if (!alive.empty()) ::kill(sleeper, SIGKILL);
}

TEST(DirectoryLock, SecondHolderIsRefusedUntilTheFirstReleases) {
  TempDir dir;
  auto first = DirectoryLock::Acquire(dir.path(), "run directory");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(ReadFile(dir.path() + "/.kiln.lock"), std::to_string(::getpid()) + "\n");
  // flock belongs to the open file: a second open of the lock file, even in this process, is
  // refused.
  auto second = DirectoryLock::Acquire(dir.path(), "run directory");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            dir.path() + " is in use: another kiln process (pid " + std::to_string(::getpid()) +
                ") holds its lock " + dir.path() +
                "/.kiln.lock; wait for it to end, or choose another run directory");
  *first = DirectoryLock();
  EXPECT_TRUE(DirectoryLock::Acquire(dir.path(), "run directory").ok());
}

// Training into a run directory another kiln trains in, or resuming its checkpoint, is refused;
// after the holder is killed with SIGKILL the lock file it left (its pid inside) blocks nothing.
TEST(RunDirLock, SecondTrainingIsRefusedAndAKilledHolderBlocksNothing) {
  TempDir dir;
  std::string run = dir.path() + "/run";
  pid_t holder =
      testing::StartInOwnGroup(Train(run, {"trainer.max_epochs=100000", "data.train_size=30000"}));
  ASSERT_GT(holder, 0);
  ASSERT_TRUE(WaitForLock(run, holder));
  std::string config = dir.path() + "/run/.hydra/config.yaml";
  ASSERT_TRUE(WaitForFile(config));
  std::string config_before = ReadFile(config);
  ExpectRefused(RunProcess(Train(run, {"trainer.max_epochs=1", "optimizer.lr=0.5"})), run, holder);
  ExpectRefused(RunProcess(Train(run, {"trainer.max_epochs=1", "ckpt_path=last"})), run, holder);
  EXPECT_EQ(ReadFile(config), config_before);  // the refused runs wrote nothing

  EXPECT_TRUE(testing::KillLeaderAndWaitForGroup(holder, 30).empty());
  EXPECT_EQ(ReadFile(run + "/.kiln.lock"), std::to_string(holder) + "\n");  // left behind, stale
  auto after = RunProcess(Train(run, {"trainer.max_epochs=1"}));
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_FALSE(absl::StrContains(after.err, "lock")) << after.err;
  EXPECT_TRUE(FileExists(run + "/test_metrics.yaml"));
}

// trainer.devices=2: the launching process holds the run's lock; its two ranks train (they take
// no lock of their own), and a second run into the folder is refused naming the launcher.
TEST(RunDirLock, DataParallelRanksTrainUnderTheLaunchersLock) {
  TempDir dir;
  std::string run = dir.path() + "/run";
  pid_t holder = testing::StartInOwnGroup(
      Train(run, {"trainer.devices=2", "trainer.max_epochs=100000", "data.train_size=30000",
                  "trainer.log_every_n_steps=1"}));
  ASSERT_GT(holder, 0);
  ASSERT_TRUE(WaitForLock(run, holder));
  ASSERT_TRUE(WaitForFile(run + "/metrics.csv"));  // both ranks joined and trained a step
  ExpectRefused(RunProcess(Train(run, {"trainer.max_epochs=1"})), run, holder);
  EXPECT_TRUE(testing::KillLeaderAndWaitForGroup(holder, 60).empty());
}

// Two sweeps into one folder: the second is refused naming the first; the first's jobs lock their
// own folders under it, so the sweep's lock does not block them. The epochs come from the
// environment so that the re-run after the kill is the same sweep (its ledger would refuse
// another).
TEST(SweepDirLock, SecondSweepIsRefusedAndAKilledSweepBlocksNothing) {
  TempDir dir;
  std::string sweep = dir.path() + "/sweep";
  std::vector<std::string> argv = {KILN_BINARY,
                                   "train",
                                   "-m",
                                   "--plugin",
                                   BLOBS_PLUGIN,
                                   "experiment=blobs",
                                   "trainer.num_threads=1",
                                   "hydra/launcher=local",
                                   "hydra.launcher.n_jobs=1",
                                   "hydra.sweep.dir=" + sweep,
                                   "trainer.max_epochs=${oc.decode:${oc.env:RELIABILITY_EPOCHS}}",
                                   "data.seed=0,1"};
  ::setenv("RELIABILITY_EPOCHS", "100000", 1);
  pid_t holder = testing::StartInOwnGroup(argv);
  ::unsetenv("RELIABILITY_EPOCHS");
  ASSERT_GT(holder, 0);
  ASSERT_TRUE(WaitForLock(sweep, holder));
  ASSERT_TRUE(WaitForFile(sweep + "/0/metrics.csv"));  // job 0 trains under the sweep's lock
  std::string job_lock = ReadFile(sweep + "/0/.kiln.lock");
  EXPECT_NE(job_lock,
            std::to_string(holder) + "\n");  // the job process holds its own folder's lock
  ExpectRefused(RunProcess(argv, {{"RELIABILITY_EPOCHS", "1"}}), sweep, holder);

  EXPECT_TRUE(testing::KillLeaderAndWaitForGroup(holder, 60).empty());
  auto rerun = RunProcess(argv, {{"RELIABILITY_EPOCHS", "1"}});
  EXPECT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_EQ(Lines(ReadFile(sweep + "/ledger.yaml"), "status: ok").size(), 2u);
}

// --- disk faults ---------------------------------------------------------------------------

struct Fault {
  const char* name;
  const char* ops;
  const char* error;
  const char* strerror;
};

std::map<std::string, std::string> FaultEnv(const Fault& fault, const std::string& path,
                                            int after = 0) {
  return {{"LD_PRELOAD", FAULT_INJECTION_LIBRARY},
          {"KILN_FAULT_PATH", path},
          {"KILN_FAULT_OPS", fault.ops},
          {"KILN_FAULT_ERRNO", fault.error},
          {"KILN_FAULT_AFTER", std::to_string(after)}};
}

// The files of a folder, by name, with their bytes.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadFile(entry.path().string());
  }
  return files;
}

// A failure of the disk: exit code 1, one line saying what and where, no trace from LibTorch.
void ExpectOneErrorLine(const testing::ProcessResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto errors = Lines(r.err, "kiln: error: ");
  ASSERT_EQ(errors.size(), 1u) << r.err;
  for (const auto& part : parts)
    EXPECT_TRUE(absl::StrContains(errors[0], part)) << part << "\n" << errors[0];
  EXPECT_FALSE(absl::StrContains(r.err, "Exception raised from")) << r.err;
}

class CheckpointFault : public ::testing::TestWithParam<Fault> {};

// A checkpoint write that fails stops training with one line (trainer.on_save_error=stop) and
// leaves every checkpoint written before it as it was, with no temporary file behind.
TEST_P(CheckpointFault, StopsAndKeepsThePreviousCheckpoints) {
  const Fault& fault = GetParam();
  TempDir dir;
  std::string run = dir.path() + "/run";
  auto first = RunProcess(Train(run, {"trainer.max_epochs=2", "test=false"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto before = Files(run + "/checkpoints");
  ASSERT_EQ(before.count("last.ckpt"), 1u);

  auto r = RunProcess(Train(run, {"trainer.max_epochs=4", "ckpt_path=last", "optimizer.lr=0.05"}),
                      FaultEnv(fault, "/checkpoints/"));
  ExpectOneErrorLine(
      r, {"checkpoint not saved: ", run + "/checkpoints/", fault.strerror, "is intact",
          "training stopped (trainer.on_save_error=continue trains on without checkpoints)"});
  EXPECT_EQ(Files(run + "/checkpoints"), before);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, CheckpointFault,
    ::testing::Values(Fault{"write_enospc", "write", "ENOSPC", "No space left on device"},
                      Fault{"write_eio", "write", "EIO", "Input/output error"},
                      Fault{"fsync_eio", "fsync", "EIO", "Input/output error"},
                      Fault{"rename_eio", "rename", "EIO", "Input/output error"},
                      Fault{"read_only", "open", "EROFS", "Read-only file system"}),
    [](const auto& info) { return std::string(info.param.name); });

// trainer.on_save_error=continue: one warning, and the run trains and tests to its end without
// checkpoints.
TEST(CheckpointFault, ContinueTrainsOnWithoutCheckpoints) {
  TempDir dir;
  std::string run = dir.path() + "/run";
  auto r = RunProcess(Train(run, {"trainer.max_epochs=3", "trainer.on_save_error=continue"}),
                      FaultEnv({"", "write", "ENOSPC", ""}, "/checkpoints/"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto warnings = Lines(r.err, "checkpoint not saved");
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_TRUE(absl::StrContains(warnings[0], "No space left on device")) << warnings[0];
  EXPECT_TRUE(absl::StrContains(
      warnings[0], "training goes on without checkpoints (trainer.on_save_error=continue)"))
      << warnings[0];
  EXPECT_TRUE(FileExists(run + "/test_metrics.yaml"));
  EXPECT_EQ(Lines(ReadFile(run + "/metrics.csv"), "").size() > 3, true);
  EXPECT_TRUE(Files(run + "/checkpoints").empty());
}

struct LoggerFault {
  const char* logger;
  const char* file;
};

class MetricsFault : public ::testing::TestWithParam<LoggerFault> {};

// A metrics file that cannot be written: one warning, the logger is off, the run goes on to its
// end, and the file keeps whole rows only.
TEST_P(MetricsFault, WarnsOnceAndTheRunGoesOn) {
  const LoggerFault& param = GetParam();
  TempDir dir;
  std::string run = dir.path() + "/run";
  auto r = RunProcess(Train(run, {"trainer.max_epochs=3", std::string("logger=") + param.logger,
                                  "trainer.log_every_n_steps=5"}),
                      FaultEnv({"", "write", "ENOSPC", ""}, param.file, /*after=*/4));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto warnings = Lines(r.err, "metrics logger failed");
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_TRUE(absl::StrContains(warnings[0],
                                "write failed: No space left on device; this logger is off for the "
                                "rest of the run, which goes on"))
      << warnings[0];
  EXPECT_TRUE(FileExists(run + "/test_metrics.yaml"));
  if (std::string(param.logger) != "tensorboard") {
    std::string rows = ReadFile(run + "/" + param.file);
    ASSERT_FALSE(rows.empty());
    EXPECT_EQ(rows.back(), '\n') << rows;
  }
}

INSTANTIATE_TEST_SUITE_P(Loggers, MetricsFault,
                         ::testing::Values(LoggerFault{"csv", "metrics.csv"},
                                           LoggerFault{"jsonl", "metrics.jsonl"},
                                           LoggerFault{"tensorboard", "tfevents"}),
                         [](const auto& info) { return std::string(info.param.logger); });

// kiln's own log file failing: one warning, logging goes on to stderr, the run ends normally.
TEST(LogFault, WarnsOnceAndTheRunGoesOn) {
  TempDir dir;
  std::string run = dir.path() + "/run";
  auto r = RunProcess(Train(run, {"trainer.max_epochs=2"}),
                      FaultEnv({"", "write", "EIO", ""}, "/run/train.log", 3));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto warnings = Lines(r.err, "log file " + run + "/train.log: write failed: Input/output error");
  EXPECT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_TRUE(FileExists(run + "/test_metrics.yaml"));
}

// The run directory's .hydra files: one line, and no config file under its final name.
TEST(RunDirFault, RefusesInOneLineWithNoHalfWrittenConfig) {
  TempDir dir;
  std::string run = dir.path() + "/run";
  for (const Fault& fault : {Fault{"", "write", "ENOSPC", "No space left on device"},
                             Fault{"", "open", "EROFS", "Read-only file system"}}) {
    auto r = RunProcess(Train(run, {"trainer.max_epochs=1"}), FaultEnv(fault, "/.hydra/"));
    ExpectOneErrorLine(r, {run + "/.hydra/config.yaml", fault.strerror});
    EXPECT_TRUE(!FileExists(run + "/.hydra") || Files(run + "/.hydra").empty());
  }
}

// A file size limit (prlimit --fsize) below a checkpoint's size: EFBIG, reported as a full disk
// is (one line, exit 1), not a process killed by SIGXFSZ.
TEST(FileSizeLimit, CheckpointOverTheLimitIsOneLineNotASignal) {
  if (!FileExists("/usr/bin/prlimit")) GTEST_SKIP() << "no /usr/bin/prlimit (util-linux)";
  TempDir dir;
  std::string run = dir.path() + "/run";
  std::vector<std::string> argv = {"/usr/bin/prlimit", "--fsize=20000"};
  for (const auto& a : Train(run, {"trainer.max_epochs=1", "test=false"})) argv.push_back(a);
  auto r = RunProcess(argv);
  ExpectOneErrorLine(r, {"checkpoint not saved: ", run + "/checkpoints/", "File too large",
                         "nothing was written"});
  EXPECT_TRUE(Files(run + "/checkpoints").empty());
}

// kiln export under ENOSPC and EIO: one line, and nothing under the export's final names.
TEST(ExportFault, RefusesInOneLineAndLeavesNoFile) {
  TempDir dir;
  std::string run = dir.path() + "/run";
  auto trained = RunProcess(Train(run, {"trainer.max_epochs=1", "test=false"}));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  for (const Fault& fault : {Fault{"", "write", "ENOSPC", "No space left on device"},
                             Fault{"", "fsync", "EIO", "Input/output error"}}) {
    std::string out = dir.path() + "/export";
    auto r = RunProcess(
        {KILN_BINARY, "export", "--plugin", BLOBS_PLUGIN, "run_dir=" + run, "hydra.run.dir=" + out},
        FaultEnv(fault, "/export/model"));
    ExpectOneErrorLine(r, {out + "/model.safetensors", fault.strerror});
    for (const auto& [name, bytes] : Files(out))
      EXPECT_FALSE(absl::StartsWith(name, "model")) << name;
  }
}

// SIGINT or SIGTERM while kiln validate, test or predict works through its batches: it stops
// before the next batch with exit code 130 or 143 and one line, and writes no metrics or
// predictions (a split of 2,000,000 one-sample batches would take minutes).
struct StopCase {
  std::string command, log_line, doing, output;
  int signal;
};

class StopSignal : public ::testing::TestWithParam<StopCase> {};

TEST_P(StopSignal, StopsBetweenBatchesWithNothingWritten) {
  const StopCase& c = GetParam();
  TempDir dir;
  std::string run = dir.path() + "/run";
  auto trained = RunProcess(Train(run, {"trainer.max_epochs=1", "test=false"}));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::string out = dir.path() + "/" + c.command, err = dir.path() + "/stderr";
  pid_t pid = StartWithStderrTo(
      {KILN_BINARY, c.command, "--plugin", BLOBS_PLUGIN, "run_dir=" + run, "data.val_size=2000000",
       "data.test_size=2000000", "data.batch_size=1", "hydra.run.dir=" + out},
      err);
  ASSERT_GT(pid, 0);
  // The command's handlers are in place once it logs the batches it is about to run.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!absl::StrContains(FileExists(err) ? ReadFile(err) : "", c.log_line) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(absl::StrContains(ReadFile(err), c.log_line)) << ReadFile(err);
  ::kill(pid, c.signal);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + c.signal);
  std::string text = ReadFile(err);
  auto errors = Lines(text, "kiln: error: ");
  ASSERT_EQ(errors.size(), 1u) << text;
  EXPECT_TRUE(absl::StrContains(
      errors[0],
      absl::StrCat("stopped by ", c.signal == SIGINT ? "SIGINT" : "SIGTERM", " ", c.doing)))
      << errors[0];
  EXPECT_FALSE(FileExists(out + "/" + c.output)) << c.output;
}

INSTANTIATE_TEST_SUITE_P(
    Commands, StopSignal,
    ::testing::Values(StopCase{"validate", "validating: 2000000 batches",
                               "while evaluating the validation split", "val_metrics.yaml", SIGINT},
                      StopCase{"test", "testing: 2000000 batches",
                               "while evaluating the test split", "test_metrics.yaml", SIGTERM},
                      StopCase{"predict", "predicting: 2000000 batches", "while predicting",
                               "predictions.csv", SIGINT}),
    [](const auto& info) { return info.param.command; });

// The tensors of a safetensors file (its header without __metadata__, which names the source
// checkpoint, and its data), for comparing exported weights bitwise.
std::string SafetensorsTensors(const std::string& path) {
  std::string bytes = ReadFile(path);
  if (bytes.size() < 8) return "";
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  if (8 + header > bytes.size()) return "";
  std::string head = bytes.substr(8, header);
  size_t meta = head.find("\"__metadata__\"");
  if (meta != std::string::npos) head.erase(meta, head.find('}', meta) - meta + 1);
  // Offsets shift with the metadata's length; the data and the names, dtypes and shapes do not.
  return absl::StrCat(std::count(head.begin(), head.end(), '{'), bytes.substr(8 + header));
}

// SIGKILL at random moments, 54 times, seeded: a third after a random delay (during start-up,
// training, validation or a save), a third just before the rename of a checkpoint into place, a
// third just after it (a checkpoint at an epoch's last step: the kill lands in the validation that
// follows). After each kill the run resumes (ckpt_path=last once a checkpoint exists); any exit
// but a kill or success fails the test. It ends with bitwise the parameters of a run never killed.
TEST(KillLoop, FiftyFourKillsResumeToBitwiseTheSameParameters) {
  TempDir dir;
  // 50 epochs of 100 steps and 300 validation batches: about 15 s unbroken on this machine, longer
  // than the 54 attempts advance it (an attempt starts up in about half a second, and a kill
  // before a rename advances nothing).
  const std::vector<std::string> job = {"data.train_size=6400",
                                        "data.val_size=19200",
                                        "data.batch_size=64",
                                        "model.hidden=[512,512]",
                                        "trainer.max_epochs=50",
                                        "+callbacks.model_checkpoint.every_n_train_steps=20",
                                        "callbacks.model_checkpoint.monitor=''",
                                        "callbacks.model_checkpoint.save_top_k=0",
                                        "test=false"};
  const std::string reference = dir.path() + "/reference", run = dir.path() + "/killed";
  auto r = RunProcess(Train(reference, job));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::mt19937 rng(20261126);
  int kills = 0, timed = 0, before_rename = 0, after_rename = 0, in_validation = 0;
  const std::string log = run + "/train.log", err = dir.path() + "/stderr";
  bool finished = false;
  for (int attempt = 0; kills < 54 && !finished; ++attempt) {
    const int mode = attempt % 3;  // 0: a delay; 1: just before a checkpoint rename; 2: just after
    const int k = std::uniform_int_distribution<int>(1, 3)(rng);
    const int delay_ms = std::uniform_int_distribution<int>(200, 1500)(rng);
    std::vector<std::string> argv = {"/usr/bin/env"};
    if (mode != 0) {
      for (const auto& [name, value] :
           FaultEnv(Fault{"", "rename", mode == 1 ? "KILL" : "KILL_AFTER", ""}, "/checkpoints/",
                    k - 1)) {
        argv.push_back(name + "=" + value);
      }
    }
    for (const auto& a : Train(run, job)) argv.push_back(a);
    if (FileExists(run + "/checkpoints/last.ckpt")) argv.push_back("ckpt_path=last");
    const size_t log_before = FileExists(log) ? ReadFile(log).size() : 0;
    pid_t pid = StartWithStderrTo(argv, err);
    ASSERT_GT(pid, 0);
    int status = 0;
    if (mode == 0) {
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
      pid_t reaped = 0;
      while (std::chrono::steady_clock::now() < until &&
             (reaped = ::waitpid(pid, &status, WNOHANG)) == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (reaped != pid) {
        ::kill(pid, SIGKILL);
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      }
    } else {
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    }
    if (WIFEXITED(status)) {  // it ran to the end before the kill came
      ASSERT_EQ(WEXITSTATUS(status), 0) << "attempt " << attempt << ": " << ReadFile(err);
      finished = true;
      continue;
    }
    ASSERT_EQ(WTERMSIG(status), SIGKILL) << "attempt " << attempt << ": " << ReadFile(err);
    ++kills;
    (mode == 0 ? timed : mode == 1 ? before_rename : after_rename)++;
    // Killed in validation: this attempt's log ends with the epoch's last training batch (the
    // progress line "100/100"), before the epoch's summary line that validation ends with.
    std::string added =
        FileExists(log) ? ReadFile(log).substr(std::min(log_before, ReadFile(log).size())) : "";
    auto lines = absl::StrSplit(absl::StripTrailingAsciiWhitespace(added), '\n');
    std::string last;
    for (absl::string_view line : lines) last = std::string(line);
    if (absl::StrContains(last, " 100/100 ")) ++in_validation;
  }
  EXPECT_GE(kills, 54) << "the run finished after " << kills << " kills";
  // The last resume runs to the end.
  if (!finished) {
    auto rest = RunProcess([&] {
      auto argv = Train(run, job);
      argv.push_back("ckpt_path=last");
      return argv;
    }());
    ASSERT_EQ(rest.exit_code, 0) << rest.err;
  }
  // The temporary files of the checkpoint writes that were killed are gone (the next run removes
  // them).
  for (const auto& [name, bytes] : Files(run + "/checkpoints"))
    EXPECT_FALSE(absl::StrContains(name, ".tmp.")) << name;
  EXPECT_GE(before_rename, 1);
  EXPECT_GE(after_rename, 1);
  EXPECT_GE(in_validation, 1) << "no kill landed in validation";
  std::cout << "kill loop: " << kills << " kills (" << timed << " timed, " << before_rename
            << " before a rename, " << after_rename << " after one; " << in_validation
            << " in validation), seed 20261126\n";
  for (const std::string& which : {reference, run}) {
    auto exported = RunProcess({KILN_BINARY, "export", "--plugin", BLOBS_PLUGIN, "run_dir=" + which,
                                "hydra.run.dir=" + which + "/export"});
    ASSERT_EQ(exported.exit_code, 0) << exported.err;
  }
  std::string a = SafetensorsTensors(reference + "/export/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == SafetensorsTensors(run + "/export/model.safetensors"))
      << "the parameters differ";
}

// A local sweep (32 jobs, 2 at a time) killed 20 times at random moments (seeded): half the time
// the whole process group with SIGKILL, half the time the sweep process alone (its jobs then get
// SIGTERM and stop). After each kill the ledger is consistent: every whole line records a job
// (ok or failed) as the sweep wrote it, no job is ok twice, and every job recorded ok has its test
// metrics. The sweep is re-run into the same folder each time; it ends with every job ok once and
// each job's test metrics byte for byte those of a sweep never killed.
TEST(KillLoop, LocalSweepKilledTwentyTimesKeepsItsLedgerConsistent) {
  TempDir dir;
  auto sweep_argv = [](const std::string& sweep_dir) {
    return BlobsSweepOfTwoEpochs(sweep_dir, "range(0,32)");
  };
  const std::string reference = dir.path() + "/reference", sweep = dir.path() + "/killed";
  auto r = RunProcess(sweep_argv(reference));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::mt19937 rng(1126);
  int kills = 0, group_kills = 0;
  bool finished = false;
  for (int attempt = 0; kills < 20 && !finished; ++attempt) {
    const int delay_ms = std::uniform_int_distribution<int>(150, 1500)(rng);
    const bool whole_group = attempt % 2 == 0;
    pid_t pid = testing::StartInOwnGroup(sweep_argv(sweep));
    ASSERT_GT(pid, 0);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    int status = 0;
    pid_t reaped = 0;
    while (std::chrono::steady_clock::now() < until &&
           (reaped = ::waitpid(pid, &status, WNOHANG)) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (reaped == pid) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "attempt " << attempt;
      finished = true;
    } else if (whole_group) {
      ::kill(-pid, SIGKILL);
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ++group_kills;
    } else {
      EXPECT_TRUE(testing::KillLeaderAndWaitForGroup(pid, 60).empty()) << "jobs outlived the sweep";
    }
    if (reaped != pid) ++kills;
    // The jobs of a sweep killed alone stop on their own: wait until none is left.
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
         !testing::ProcessesInGroup(pid).empty() && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string ledger =
        FileExists(sweep + "/ledger.yaml") ? ReadFile(sweep + "/ledger.yaml") : "";
    std::vector<absl::string_view> lines = absl::StrSplit(ledger, '\n');
    if (!lines.empty()) lines.pop_back();  // after the last newline: nothing, or a line cut short
    std::map<int, int> ok;
    for (absl::string_view line : lines) {
      int job = -1;
      ASSERT_TRUE(absl::StartsWith(line, "- {job: ")) << "attempt " << attempt << ": " << line;
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(8, line.find(',') - 8), &job) && job >= 0 &&
                  job < 32)
          << line;
      const bool is_ok = absl::StrContains(line, ", status: ok,");
      ASSERT_TRUE(is_ok || absl::StrContains(line, ", status: failed,")) << line;
      if (is_ok) {
        EXPECT_EQ(++ok[job], 1) << "job " << job << " recorded ok twice:\n" << ledger;
        EXPECT_TRUE(FileExists(sweep + "/" + std::to_string(job) + "/test_metrics.yaml")) << job;
      }
    }
  }
  EXPECT_GE(kills, 20) << "the sweep finished after " << kills << " kills";
  const size_t done_while_killed =
      Lines(FileExists(sweep + "/ledger.yaml") ? ReadFile(sweep + "/ledger.yaml") : "",
            "status: ok")
          .size();
  if (!finished) {
    auto rest = RunProcess(sweep_argv(sweep));
    ASSERT_EQ(rest.exit_code, 0) << rest.err;
  }
  std::cout << "sweep kill loop: " << kills << " kills (" << group_kills << " of the whole group), "
            << done_while_killed << " of 32 jobs done by then, seed 1126\n";
  const std::string ledger = ReadFile(sweep + "/ledger.yaml");
  for (int job = 0; job < 32; ++job) {
    const std::string metrics = "/" + std::to_string(job) + "/test_metrics.yaml";
    EXPECT_EQ(Lines(ledger, absl::StrCat("{job: ", job, ", status: ok")).size(), 1u) << ledger;
    ASSERT_TRUE(FileExists(reference + metrics) && FileExists(sweep + metrics)) << job;
    EXPECT_EQ(ReadFile(reference + metrics), ReadFile(sweep + metrics)) << job;
  }
}

// SIGTERM to a local sweep alone (as a scheduler or `kill` sends it): it starts no new job, passes
// the signal to its running jobs, waits for them, and exits 143 with one line saying how many
// jobs are done; no job process outlives it, and re-running the command finishes the sweep.
TEST(StopSignal, ASweepStopsItsJobsAndSaysHowToFinish) {
  TempDir dir;
  const std::string sweep = dir.path() + "/sweep", err = dir.path() + "/stderr";
  const std::vector<std::string> argv = BlobsSweepOfTwoEpochs(sweep, "range(0,8)");
  pid_t pid = StartWithStderrTo(argv, err);
  ASSERT_GT(pid, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (Lines(FileExists(sweep + "/ledger.yaml") ? ReadFile(sweep + "/ledger.yaml") : "",
               "status: ok")
             .empty() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 143);
  // The jobs share the sweep's stderr: theirs say where each stopped ("interrupted by SIGTERM at
  // epoch E, step S; resume with ...", or, for a job past its fit, "stopped by SIGTERM while
  // evaluating the test split ..."); the sweep's own line comes last.
  const std::string text = ReadFile(err);
  auto errors = Lines(text, "kiln: error: stopped by SIGTERM with ");
  ASSERT_EQ(errors.size(), 1u) << text;
  for (const auto& line : Lines(text, "kiln: error: ")) {
    EXPECT_TRUE(line == errors[0] || absl::StrContains(line, "interrupted by SIGTERM at epoch") ||
                absl::StrContains(line, "stopped by SIGTERM while evaluating the test split"))
        << line;
  }
  EXPECT_TRUE(absl::StrContains(errors[0], "done; run the same command again for the rest"))
      << errors[0];
  EXPECT_TRUE(testing::ProcessesInGroup(pid).empty()) << "a job outlived the sweep";
  const size_t done = Lines(ReadFile(sweep + "/ledger.yaml"), "status: ok").size();
  EXPECT_TRUE(absl::StrContains(errors[0], absl::StrCat("with ", done, " job(s)"))) << errors[0];
  ASSERT_LT(done, 8u) << "the sweep ended before the signal";
  auto rerun = RunProcess(argv);
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_TRUE(absl::StrContains(rerun.err, absl::StrCat(done, " of 8 jobs are done"))) << rerun.err;
  EXPECT_EQ(Lines(ReadFile(sweep + "/ledger.yaml"), "status: ok").size(), 8u);
}

}  // namespace
}  // namespace kiln
