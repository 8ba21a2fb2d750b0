// Data-parallel training through the real `kiln` binary on c10d/Gloo, with the gaussian_blobs
// plugin's data: 2 workers x batch 64 reach the parameters of 1 worker x batch 128; a run stopped
// at 2 workers resumes at 1; torchrun-style ranks share rank 0's run directory; a worker that dies
// makes the others stop with a message naming it instead of hanging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/weights/checkpoint.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::ReadFile;
using testing::RunProcess;

// A deterministic blobs run (no dropout, no checkpoint callback, 2 threads shared by the workers).
std::vector<std::string> Blobs(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> argv = {KILN_BINARY,
                                   "train",
                                   "--plugin",
                                   BLOBS_PLUGIN,
                                   "experiment=blobs",
                                   "hydra.run.dir=" + dir,
                                   "model.dropout=0.0",
                                   "trainer.deterministic=true",
                                   "trainer.enable_progress_bar=false",
                                   "trainer.num_sanity_val_steps=0",
                                   "trainer.max_epochs=5",
                                   "data.num_workers=0",
                                   "test=false"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::map<std::string, torch::Tensor> Weights(const std::string& ckpt) {
  torch::serialize::InputArchive archive;
  EXPECT_TRUE(ReadCheckpoint(ckpt, &archive).ok()) << ckpt;
  auto state = ReadModelState(archive, ckpt);
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *state : std::map<std::string, torch::Tensor>{};
}

int64_t Counter(const std::string& ckpt, const std::string& key) {
  torch::serialize::InputArchive archive;
  EXPECT_TRUE(ReadCheckpoint(ckpt, &archive).ok());
  c10::IValue v;
  archive.read(key, v);
  return v.toInt();
}

// The largest relative difference ||a - b|| / ||b|| over the parameters.
double MaxRelativeDifference(const std::string& a_ckpt, const std::string& b_ckpt) {
  auto a = Weights(a_ckpt), b = Weights(b_ckpt);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_FALSE(a.empty());
  double worst = 0;
  for (const auto& [name, tensor] : b) {
    auto it = a.find(name);
    if (it == a.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    double rel =
        (it->second - tensor).norm().item<double>() / std::max(tensor.norm().item<double>(), 1e-12);
    worst = std::max(worst, rel);
  }
  return worst;
}

TEST(DataParallel, TwoWorkersOfBatch64ReachTheParametersOfOneWorkerOfBatch128) {
  testing::TempDir dir;
  std::string one = dir.path() + "/one", two = dir.path() + "/two";
  auto single = RunProcess(
      Blobs(one, {"data.batch_size=128", "trainer.max_steps=50", "trainer.num_threads=2"}));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  auto parallel =
      RunProcess(Blobs(two, {"data.batch_size=64", "trainer.max_steps=50", "trainer.devices=2"}));
  ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
  // One run directory with one log, written by rank 0; rank 1's output in rank_1.log.
  EXPECT_TRUE(FileExists(two + "/.hydra/config.yaml"));
  EXPECT_TRUE(FileExists(two + "/.hydra/resolved.yaml"));
  std::string log = ReadFile(two + "/train.log");
  EXPECT_NE(log.find("data parallel: 2 ranks over gloo"), std::string::npos) << log;
  EXPECT_NE(log.find("1 threads per rank, 2 ranks"), std::string::npos) << log;
  EXPECT_TRUE(FileExists(two + "/rank_1.log"));
  EXPECT_FALSE(FileExists(two + "/rank_0.log"));

  std::string a = one + "/checkpoints/last.ckpt", b = two + "/checkpoints/last.ckpt";
  ASSERT_TRUE(FileExists(a) && FileExists(b));
  EXPECT_EQ(Counter(a, "loop/global_step"), 50);
  EXPECT_EQ(Counter(b, "loop/global_step"), 50);
  EXPECT_EQ(Counter(b, "loop/world_size"), 2);
  EXPECT_EQ(Counter(a, "loop/samples"), Counter(b, "loop/samples"));  // counted over all ranks
  double diff = MaxRelativeDifference(b, a);
  EXPECT_LT(diff, 1e-5);

  // Resumed at one worker of batch 128 from the two workers' step 50 (mid-epoch 1), both runs
  // continue to step 60 alike.
  auto resumed = RunProcess(Blobs(two, {"data.batch_size=128", "trainer.max_steps=60",
                                        "trainer.num_threads=2", "ckpt_path=last"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto straight = RunProcess(Blobs(one, {"data.batch_size=128", "trainer.max_steps=60",
                                         "trainer.num_threads=2", "ckpt_path=last"}));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  EXPECT_EQ(Counter(b, "loop/global_step"), 60);
  EXPECT_EQ(Counter(b, "loop/batch_in_epoch"), Counter(a, "loop/batch_in_epoch"));
  EXPECT_LT(MaxRelativeDifference(b, a), 1e-5);
}

// A model with a parameter its loss never uses: the reduction would wait for gradients that never
// come, so it is refused at the second step in one line that names the parameters and the option;
// with trainer.ddp_find_unused_parameters=true the two workers train, the used parameters reach
// one worker's (batch 64 x 2 against 128), and the unused ones stay as they started.
TEST(DataParallel, UnusedParametersAreRefusedOrFoundAsDdpDoes) {
  testing::TempDir dir;
  auto with_model = [&](const std::string& run, std::vector<std::string> extra) {
    std::vector<std::string> argv = Blobs(
        dir.path() + "/" + run, {"--plugin", UNUSED_HEAD_PLUGIN, "model._target_=unused_head_mlp"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  };
  auto refused =
      with_model("refused", {"data.batch_size=64", "trainer.max_steps=5", "trainer.devices=2"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(
      refused.err.find(
          "data parallel: the loss does not use every parameter (spare.weight, spare.bias), and "
          "the gradient reduction waits for them; set trainer.ddp_find_unused_parameters=true"),
      std::string::npos)
      << refused.err;
  auto found =
      with_model("found", {"data.batch_size=64", "trainer.max_steps=20", "trainer.devices=2",
                           "trainer.ddp_find_unused_parameters=true"});
  ASSERT_EQ(found.exit_code, 0) << found.err;
  auto single = with_model(
      "single", {"data.batch_size=128", "trainer.max_steps=20", "trainer.num_threads=2"});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  auto a = Weights(dir.path() + "/found/checkpoints/last.ckpt"),
       b = Weights(dir.path() + "/single/checkpoints/last.ckpt");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : b) {
    ASSERT_TRUE(a.count(name)) << name;
    EXPECT_TRUE(torch::allclose(a[name], tensor, 1e-5, 1e-6)) << name;
  }
}

// backbone_finetuning with two workers: the layers frozen in epoch 0 join the gradient reduction
// when they are unfrozen at epoch 1, so the two workers of batch 64 still reach one worker of
// batch 128 (a reduction fixed at setup would leave each rank's unfrozen layers to its own half
// of the data). The unfrozen layers did train: they moved from their epoch-0 values.
TEST(DataParallel, BackboneFinetuningUnfreezesIntoTheGradientReduction) {
  testing::TempDir dir;
  std::vector<std::string> finetune = {
      "+callbacks.backbone_finetuning={_target_:backbone_finetuning,params:[layers.*],unfreeze_at_"
      "epoch:1,lr_factor:0.5}",
      "trainer.max_epochs=3",
      "+callbacks.model_checkpoint={_target_:model_checkpoint,save_top_k:-1}"};
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.end(), finetune.begin(), finetune.end());
    return RunProcess(Blobs(dir.path() + "/" + name, extra));
  };
  auto parallel = run("two", {"data.batch_size=64", "trainer.devices=2"});
  ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
  auto single = run("one", {"data.batch_size=128", "trainer.num_threads=2"});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  std::string log = ReadFile(dir.path() + "/two/train.log");
  EXPECT_NE(log.find("backbone_finetuning: unfreezing 2 parameters at epoch 1"), std::string::npos)
      << log;
  EXPECT_NE(log.find("data parallel: the trained parameters changed"), std::string::npos) << log;
  EXPECT_LT(MaxRelativeDifference(dir.path() + "/two/checkpoints/last.ckpt",
                                  dir.path() + "/one/checkpoints/last.ckpt"),
            1e-5);
  // The first epoch's checkpoint: the backbone as it started; the last: trained since.
  std::vector<std::string> epoch0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/two/checkpoints")) {
    if (entry.path().filename().string().rfind("epoch=0", 0) == 0) epoch0.push_back(entry.path());
  }
  ASSERT_EQ(epoch0.size(), 1u);
  auto before = Weights(epoch0[0]), after = Weights(dir.path() + "/two/checkpoints/last.ckpt");
  ASSERT_TRUE(before.count("layers.0.weight") && after.count("layers.0.weight"));
  EXPECT_GT((after["layers.0.weight"] - before["layers.0.weight"]).abs().max().item<double>(),
            1e-4);
}

// trainer.devices as Lightning's list of GPU ids: one process per id, on that GPU. What cannot
// work is one line before anything trains: ids on the CPU, a repeated, negative or missing id, an
// id beyond CUDA_VISIBLE_DEVICES, ids where there is no GPU.
TEST(DataParallel, AListOfGpuIdsIsCheckedBeforeTraining) {
  testing::TempDir dir;
  auto run = [&](std::vector<std::string> extra) {
    return RunProcess(Blobs(dir.path() + "/run", extra));
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"trainer.devices=[0,1]", "trainer.accelerator=cpu"},
       "trainer.devices lists GPU ids, but trainer.accelerator=cpu: give a count "
       "(trainer.devices=2)"},
      {{"trainer.devices=[1,1]"}, "trainer.devices lists GPU 1 twice"},
      {{"trainer.devices=[-1]"},
       "trainer.devices lists GPU ids, and '-1' is not one (an int >= 0)"},
      {{"trainer.devices=[]"}, "trainer.devices is an empty list: give a count or GPU ids"},
  };
  for (const auto& [extra, message] : cases) {
    auto r = run(extra);
    EXPECT_EQ(r.exit_code, 2) << extra[0];
    EXPECT_NE(r.err.find("kiln: error: " + message), std::string::npos) << r.err;
  }
  if (!torch::cuda::is_available()) {
    auto r = run({"trainer.devices=[0]"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("trainer.devices lists GPU ids, but no CUDA device is available"),
              std::string::npos)
        << r.err;
  }
  ::setenv("CUDA_VISIBLE_DEVICES", "5,6", 1);
  auto beyond = run({"trainer.devices=[2]"});
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(beyond.exit_code, 2);
  EXPECT_NE(
      beyond.err.find("trainer.devices lists GPU 2, but CUDA_VISIBLE_DEVICES=5,6 makes 2 visible"),
      std::string::npos)
      << beyond.err;
}

TEST(DataParallel, BucketedReductionWithAccumulationMatchesOneProcess) {
  // Tiny buckets (many all-reduces during backward) and 2 micro-batches per step: gradients of
  // micro-steps stay local and are reduced once per step.
  testing::TempDir dir;
  std::string one = dir.path() + "/one", two = dir.path() + "/two";
  auto single = RunProcess(Blobs(one, {"data.batch_size=64", "trainer.accumulate_grad_batches=2",
                                       "trainer.max_steps=10", "trainer.num_threads=2"}));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  auto parallel = RunProcess(
      Blobs(two, {"data.batch_size=32", "trainer.accumulate_grad_batches=2", "trainer.max_steps=10",
                  "trainer.devices=2", "trainer.ddp_bucket_cap_mb=0.001"}));
  ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
  EXPECT_NE(ReadFile(two + "/train.log").find("2 gradient buckets (cap 0.001 MB)"),
            std::string::npos)
      << ReadFile(two + "/train.log");
  EXPECT_LT(MaxRelativeDifference(two + "/checkpoints/last.ckpt", one + "/checkpoints/last.ckpt"),
            1e-5);
}

// torchrun starts every rank itself; each composes its own config (a timestamped run directory
// could differ by a second). Rank 0's config and run directory win; rank 1 writes nothing of its
// own.
TEST(DataParallel, TorchrunStyleRanksShareRankZerosRunDirectory) {
  testing::TempDir dir;
  std::string port = std::to_string(20000 + getpid() % 20000);
  auto run = [&](int rank, const std::string& run_dir) {
    return RunProcess(
        Blobs(run_dir, {"data.batch_size=64", "trainer.max_steps=5", "trainer.num_threads=1"}),
        {{"RANK", std::to_string(rank)},
         {"WORLD_SIZE", "2"},
         {"MASTER_ADDR", "127.0.0.1"},
         {"MASTER_PORT", port}});
  };
  testing::ProcessResult r1;
  std::thread second([&] { r1 = run(1, dir.path() + "/rank1_dir"); });
  auto r0 = run(0, dir.path() + "/rank0_dir");
  second.join();
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_TRUE(FileExists(dir.path() + "/rank0_dir/checkpoints/last.ckpt"));
  EXPECT_FALSE(FileExists(dir.path() + "/rank1_dir")) << "rank 1 created its own run directory";
  EXPECT_EQ(Counter(dir.path() + "/rank0_dir/checkpoints/last.ckpt", "loop/world_size"), 2);
  EXPECT_EQ(r1.err, "") << "rank 1 logs nothing but warnings and errors";
}

// trainer.num_nodes=2 on one machine: each "node" runs kiln with NODE_RANK, MASTER_ADDR and
// MASTER_PORT; node 0 owns the run directory, node 1 writes none of its own.
TEST(DataParallel, TwoNodesStartTheirWorkersAndShareNodeZerosRunDirectory) {
  testing::TempDir dir;
  std::string port = std::to_string(20000 + (getpid() + 7) % 20000);
  auto node = [&](int rank, const std::string& run_dir) {
    return RunProcess(
        Blobs(run_dir, {"data.batch_size=64", "trainer.max_steps=5", "trainer.num_nodes=2",
                        "trainer.num_threads=1"}),
        {{"NODE_RANK", std::to_string(rank)}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  };
  testing::ProcessResult n1;
  std::thread second([&] { n1 = node(1, dir.path() + "/node1_dir"); });
  auto n0 = node(0, dir.path() + "/node0_dir");
  second.join();
  ASSERT_EQ(n0.exit_code, 0) << n0.err;
  ASSERT_EQ(n1.exit_code, 0) << n1.err;
  EXPECT_NE(n1.err.find("starting 1 workers (ranks 1..1 of 2)"), std::string::npos) << n1.err;
  EXPECT_EQ(Counter(dir.path() + "/node0_dir/checkpoints/last.ckpt", "loop/world_size"), 2);
  EXPECT_FALSE(FileExists(dir.path() + "/node1_dir"));
  // Without the rendezvous variables the refusal says what to set.
  auto alone = RunProcess(Blobs(dir.path() + "/x", {"trainer.num_nodes=2"}), {{"NODE_RANK", ""}});
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("start kiln on every node with NODE_RANK"), std::string::npos)
      << alone.err;
  EXPECT_FALSE(FileExists(dir.path() + "/x")) << "the refusal wrote a run directory";
}

// The PID of the worker of `parent` whose environment has RANK=<rank>, or -1.
pid_t WorkerPid(pid_t parent, int rank) {
  for (int attempt = 0; attempt < 600; ++attempt) {
    std::string children = ReadFile(absl::StrCat("/proc/", parent, "/task/", parent, "/children"));
    std::istringstream in(children);
    pid_t pid;
    while (in >> pid) {
      std::string env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
      if (env.find(absl::StrCat(std::string(1, '\0'), "RANK=", rank, std::string(1, '\0'))) !=
          std::string::npos) {
        return pid;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

// Starts `argv` with stderr into `err_file`; returns its pid.
pid_t Start(std::vector<std::string> argv, const std::string& err_file) {
  pid_t pid = fork();
  if (pid == 0) {
    if (std::freopen(err_file.c_str(), "w", stderr) == nullptr) _exit(126);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Waits until rank 0 reports that it trains (at most a minute).
void WaitUntilTraining(const std::string& run_dir) {
  for (int i = 0;
       i < 600 && ReadFile(run_dir + "/train.log").find("training on") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The exit code of `pid` (128 + N for signal N), or -1 after `seconds` (the process is killed).
int WaitForExit(pid_t pid, int seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 10; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST(DataParallel, AWorkerThatDiesStopsTheOthersWithAMessageNamingIt) {
  testing::TempDir dir;
  std::string run_dir = dir.path() + "/run", err_file = dir.path() + "/stderr.txt";
  pid_t parent = Start(Blobs(run_dir, {"data.batch_size=8", "trainer.max_epochs=50",
                                       "trainer.devices=2", "trainer.ddp_timeout=60"}),
                       err_file);
  ASSERT_GT(parent, 0);
  WaitUntilTraining(run_dir);
  // Kill rank 1 as the OOM killer would.
  pid_t rank1 = WorkerPid(parent, 1);
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  // At most 2 minutes, far below what a hang would take (ddp_timeout, then the 30 s grace).
  EXPECT_EQ(WaitForExit(parent, 120), 128 + SIGKILL);
  std::string err = ReadFile(err_file);
  EXPECT_NE(err.find("kiln: error: worker rank 1 of 2 was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << err;
  // Rank 0 noticed by itself (the connection closed), not because it was terminated.
  EXPECT_NE(err.find("another worker has probably stopped"), std::string::npos) << err;
}

// SIGTERM to kiln reaches every worker; they stop after the same step, rank 0 writes last.ckpt,
// and ckpt_path=last continues at two workers to the same parameters as a run never stopped.
TEST(DataParallel, SigtermStopsAllWorkersWithACheckpointThatResumes) {
  testing::TempDir dir;
  std::string run_dir = dir.path() + "/run", err_file = dir.path() + "/stderr.txt";
  // One schedule for every run (it is planned from max_steps); 400 ends mid-epoch (63 steps an
  // epoch: 4000 samples, 2 x 32), so each run leaves a last.ckpt to compare.
  std::vector<std::string> common = {"data.batch_size=32", "trainer.devices=2",
                                     "trainer.max_steps=400", "trainer.max_epochs=20"};
  pid_t parent = Start(Blobs(run_dir, common), err_file);
  ASSERT_GT(parent, 0);
  WaitUntilTraining(run_dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(kill(parent, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(parent, 120), 128 + SIGTERM);
  std::string err = ReadFile(err_file);
  EXPECT_NE(err.find("kiln: error: interrupted by SIGTERM"), std::string::npos) << err;
  EXPECT_EQ(err.find("worker rank"), std::string::npos)
      << "rank 0 reports the interruption alone: " << err;
  std::string ckpt = run_dir + "/checkpoints/last.ckpt";
  ASSERT_TRUE(FileExists(ckpt));
  int64_t stopped_at = Counter(ckpt, "loop/global_step");
  ASSERT_GT(stopped_at, 0);
  ASSERT_LT(stopped_at, 400) << "the signal came too late to interrupt";
  std::vector<std::string> resume = common;
  resume.push_back("ckpt_path=last");
  auto resumed = RunProcess(Blobs(run_dir, resume));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto straight = RunProcess(Blobs(dir.path() + "/straight", common));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  EXPECT_EQ(Counter(ckpt, "loop/global_step"), 400);
  EXPECT_LT(MaxRelativeDifference(ckpt, dir.path() + "/straight/checkpoints/last.ckpt"), 1e-6);
}

}  // namespace
}  // namespace kiln
