// Fully sharded training (trainer.strategy=fsdp) through the real `kiln` binary on c10d/Gloo: a
// small GPT and a small Llama train to the losses of data parallel at 2 and 4 workers, under
// FULL_SHARD and SHARD_GRAD_OP (and with activation checkpointing); sharded checkpoints resume at
// 4 -> 2 -> 1 workers on the curve of an uninterrupted run and read as one whole checkpoint; and
// what cannot work is one line.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/support/checkpoint_weights.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::ReadFile;
using testing::RunProcess;

std::string ErrorLine(const std::string& err) {
  size_t at = err.find("kiln: error: ");
  return at == std::string::npos ? "" : err.substr(at, err.find('\n', at) - at);
}

// step -> train/loss from a run's metrics.jsonl (rank 0's loss on its own batch).
std::map<int64_t, double> Losses(const std::string& run) {
  std::map<int64_t, double> out;
  std::istringstream lines(ReadFile(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    size_t step = line.find("\"step\":"), loss = line.find("\"train/loss\":");
    if (step == std::string::npos || loss == std::string::npos) continue;
    out[std::stoll(line.substr(step + 7))] = std::stod(line.substr(loss + 13));
  }
  return out;
}

double WorstRelativeDifference(const std::map<int64_t, double>& a,
                               const std::map<int64_t, double>& b, int64_t after = 0) {
  double worst = 0;
  int64_t compared = 0;
  for (const auto& [step, loss] : a) {
    auto it = b.find(step);
    if (step <= after || it == b.end()) continue;
    worst = std::max(worst, std::abs(loss - it->second) / std::abs(it->second));
    ++compared;
  }
  EXPECT_GT(compared, 0);
  return worst;
}

class FullyShardedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A text with some variety, so that the losses move differently from step to step.
    std::string text;
    const char* words[] = {"whale", "sea",  "ship", "captain", "harpoon", "deck", "storm", "oil",
                           "boat",  "mast", "wind", "white",   "line",    "crew", "sail",  "night"};
    uint32_t x = 12345;
    for (int line = 0; line < 400; ++line) {
      for (int w = 0; w < 9; ++w) {
        x = x * 1103515245u + 12345u;
        text += words[(x >> 16) % 16];
        text += w == 8 ? ".\n" : " ";
      }
    }
    dir_.Write("book/train.txt", text);
    dir_.Write("book/val.txt", text.substr(0, 2000));
    dir_.Write("book/test.txt", text.substr(2000, 2000));
  }

  // A run of `experiment` at `devices` workers of `batch` sequences each, up to `steps`.
  testing::ProcessResult Train(const std::string& run, int devices, int batch, int steps,
                               std::vector<std::string> extra,
                               const std::string& experiment = "mobydick_gpt",
                               const std::map<std::string, std::string>& env = {}) {
    std::string d = dir_.path();
    std::vector<std::string> argv = {KILN_BINARY,
                                     "train",
                                     "experiment=" + experiment,
                                     "data.train=[" + d + "/book/train.txt]",
                                     "data.val=[" + d + "/book/val.txt]",
                                     "data.test=[" + d + "/book/test.txt]",
                                     "data.block_size=32",
                                     "data.batch_size=" + std::to_string(batch),
                                     "trainer.max_steps=" + std::to_string(steps),
                                     "trainer.max_time=null",
                                     "trainer.devices=" + std::to_string(devices),
                                     "trainer.precision=32",
                                     "trainer.deterministic=true",
                                     "trainer.log_every_n_steps=1",
                                     "trainer.val_check_interval=25",
                                     "trainer.limit_val_batches=2",
                                     "trainer.num_sanity_val_steps=0",
                                     "trainer.enable_progress_bar=false",
                                     "scheduler.warmup_steps=5",
                                     "logger=jsonl",
                                     "test=false",
                                     "task.max_tokens=0",
                                     "hydra.run.dir=" + d + "/" + run};
    const bool other_model = std::any_of(
        extra.begin(), extra.end(), [](const std::string& a) { return a.rfind("model=", 0) == 0; });
    if (!other_model) {
      for (const char* size :
           {"model.dim=32", "model.depth=2", "model.heads=2", "model.mlp_dim=64"})
        argv.push_back(size);
      if (experiment == "mobydick_gpt") argv.push_back("model.dropout=0.0");
    }
    if (devices == 1) argv.push_back("trainer.num_threads=2");
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv, env);
  }

  std::string Run(const std::string& name) const { return dir_.path() + "/" + name; }

  testing::TempDir dir_;
};

TEST_F(FullyShardedTest, FullAndGradOpShardingTrainTheGptToDataParallelsLosses) {
  for (int workers : {2, 4}) {
    const int batch = 16 / workers;
    const std::string ddp = absl::StrCat("ddp", workers);
    auto reference = Train(ddp, workers, batch, 50, {"trainer.strategy=ddp"});
    ASSERT_EQ(reference.exit_code, 0) << reference.err;
    for (const std::string sharding : {"FULL_SHARD", "SHARD_GRAD_OP"}) {
      const std::string run = absl::StrCat(sharding, workers);
      auto sharded = Train(run, workers, batch, 50,
                           {"trainer.strategy=fsdp", "trainer.fsdp_sharding_strategy=" + sharding});
      ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
      auto losses = Losses(Run(run));
      EXPECT_EQ(losses.size(), 50u);
      EXPECT_LT(WorstRelativeDifference(losses, Losses(Run(ddp))), 1e-5) << run;
      // Each rank holds 1/N of the parameters (plus padding: each dimension 0 rounded up).
      std::string log = ReadFile(Run(run) + "/train.log");
      EXPECT_NE(log.find(absl::StrCat("fsdp: ", sharding, " over ", workers,
                                      " rank(s) (gloo), 2 units and the root")),
                std::string::npos)
          << log;
      // The run validated (evaluation gathers the units too) and wrote a sharded checkpoint.
      EXPECT_NE(log.find("val/loss"), std::string::npos);
      EXPECT_TRUE(FileExists(Run(run) + "/checkpoints/last.ckpt/meta.json"));
      EXPECT_TRUE(FileExists(absl::StrCat(Run(run), "/checkpoints/last.ckpt/rank-", workers - 1,
                                          "-of-", workers, ".ckpt")));
    }
  }
}

// HYBRID_SHARD over two "nodes" of two workers on this machine (each started with NODE_RANK, as
// on a cluster): the model is sharded within a node and the nodes are replicas, so the losses are
// those of data parallel over the four workers, and the sharded checkpoint holds node 0's two
// pieces, which resume in one process.
TEST_F(FullyShardedTest, HybridShardOverTwoNodesTrainsToDataParallelsLosses) {
  auto reference = Train("ddp", 4, 4, 30, {"trainer.strategy=ddp"});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const std::string port = std::to_string(20000 + (getpid() + 11) % 20000);
  auto node = [&](int rank) {
    return Train(
        rank == 0 ? "hybrid" : "hybrid_node1", 2, 4, 30,
        {"trainer.strategy=fsdp", "trainer.fsdp_sharding_strategy=HYBRID_SHARD",
         "trainer.num_nodes=2"},
        "mobydick_gpt",
        {{"NODE_RANK", std::to_string(rank)}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  };
  testing::ProcessResult second;
  std::thread other([&] { second = node(1); });
  auto first = node(0);
  other.join();
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  std::string log = ReadFile(Run("hybrid") + "/train.log");
  EXPECT_NE(log.find("fsdp: HYBRID_SHARD (each of 2 nodes a replica) over 2 rank(s) (gloo)"),
            std::string::npos)
      << log;
  EXPECT_LT(WorstRelativeDifference(Losses(Run("hybrid")), Losses(Run("ddp"))), 1e-5);
  const std::string ckpt = Run("hybrid") + "/checkpoints/last.ckpt";
  EXPECT_TRUE(FileExists(ckpt + "/rank-1-of-2.ckpt"));
  EXPECT_FALSE(FileExists(ckpt + "/rank-2-of-4.ckpt"));
  // Node 0's two pieces make the whole model: data parallel's weights.
  auto whole = testing::CheckpointWeights(ckpt);
  auto ddp = testing::CheckpointWeights(Run("ddp") + "/checkpoints/last.ckpt");
  ASSERT_FALSE(ddp.empty());
  ASSERT_EQ(whole.size(), ddp.size());
  for (const auto& [name, tensor] : ddp) {
    ASSERT_EQ(whole.count(name), 1u) << name;
    ASSERT_EQ(whole[name].sizes(), tensor.sizes()) << name;
    if (!tensor.is_floating_point()) continue;
    EXPECT_LT((whole[name] - tensor).norm().item<double>() /
                  std::max(tensor.norm().item<double>(), 1e-12),
              1e-4)
        << name;
  }
  auto resumed = Train("hybrid", 1, 16, 35, {"trainer.strategy=fsdp", "ckpt_path=last"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(Losses(Run("hybrid")).size(), 35u);
}

// fsdp_auto_wrap_policy=size: the GPT's two blocks (about 8.5k parameters each) make one unit at
// a threshold of 10k, gathered at the first block's input and resharded after the second's output,
// also with each block recomputed alone in the backward; the losses stay data parallel's. A
// threshold no run of blocks reaches leaves them in the root.
TEST_F(FullyShardedTest, SizePolicyGroupsBlocksIntoUnitsWithDataParallelsLosses) {
  auto reference = Train("ddp", 2, 8, 30, {"trainer.strategy=ddp"});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const std::vector<std::string> size = {"trainer.strategy=fsdp",
                                         "trainer.fsdp_auto_wrap_policy=size"};
  for (const std::string sharding : {"FULL_SHARD", "SHARD_GRAD_OP"}) {
    std::vector<std::string> extra = size;
    extra.insert(extra.end(),
                 {"trainer.fsdp_min_num_params=10000", "trainer.fsdp_sharding_strategy=" + sharding,
                  "model.activation_checkpointing=true"});
    auto grouped = Train(sharding, 2, 8, 30, extra);
    ASSERT_EQ(grouped.exit_code, 0) << grouped.err;
    EXPECT_NE(ReadFile(Run(sharding) + "/train.log").find("1 units and the root"),
              std::string::npos)
        << sharding;
    EXPECT_LT(WorstRelativeDifference(Losses(Run(sharding)), Losses(Run("ddp"))), 1e-5) << sharding;
  }
  std::vector<std::string> extra = size;
  extra.push_back("trainer.fsdp_min_num_params=100000");
  auto root = Train("root", 2, 8, 5, extra);
  ASSERT_EQ(root.exit_code, 0) << root.err;
  EXPECT_NE(ReadFile(Run("root") + "/train.log").find("0 units and the root"), std::string::npos);
}

TEST_F(FullyShardedTest, TheWholeModelAsOneUnitTrainsAnRnnToDataParallelsLosses) {
  // fsdp_auto_wrap_policy=none: any model, here an LSTM language model with no blocks.
  const std::vector<std::string> lstm = {"model=lstm_lm", "model.dim=16", "model.hidden=16",
                                         "~model.depth",  "~model.heads", "~model.mlp_dim"};
  std::vector<std::string> ddp = lstm, fsdp = lstm;
  ddp.push_back("trainer.strategy=ddp");
  fsdp.push_back("trainer.strategy=fsdp");
  fsdp.push_back("trainer.fsdp_auto_wrap_policy=none");
  auto reference = Train("ddp", 2, 8, 30, ddp);
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  auto sharded = Train("fsdp", 2, 8, 30, fsdp);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  EXPECT_NE(ReadFile(Run("fsdp") + "/train.log").find("0 units and the root"), std::string::npos);
  EXPECT_LT(WorstRelativeDifference(Losses(Run("fsdp")), Losses(Run("ddp"))), 1e-5);
}

TEST_F(FullyShardedTest, LlamaShardsWithActivationCheckpointingToDataParallelsLosses) {
  const std::vector<std::string> llama = {"model.kv_heads=1", "model.max_positions=32"};
  auto reference =
      Train("ddp", 2, 8, 50, {"trainer.strategy=ddp", llama[0], llama[1]}, "mobydick_llama");
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  auto sharded =
      Train("fsdp", 2, 8, 50,
            {"trainer.strategy=fsdp", "model.activation_checkpointing=true", llama[0], llama[1]},
            "mobydick_llama");
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  EXPECT_LT(WorstRelativeDifference(Losses(Run("fsdp")), Losses(Run("ddp"))), 1e-5);
}

TEST_F(FullyShardedTest, LoraOnAFrozenBaseShardsAndItsCheckpointResumesWithDdp) {
  // Only the adapters train: a unit's backward ends after the last of its trainable parameters
  // has its gradient (the frozen LayerNorm before them still needs its weights). The token table
  // (tied to the head, which stays on the base table) carries an adapter too, outside the blocks'
  // units.
  const std::string lora = "model.lora={r: 4, alpha: 8, target_modules: [c_attn, wte]}";
  auto reference = Train("ddp", 2, 8, 20, {"trainer.strategy=ddp", lora});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  auto sharded = Train("fsdp", 2, 8, 20, {"trainer.strategy=fsdp", lora});
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  // Two blocks' c_attn and the table.
  EXPECT_NE(sharded.err.find("adapters of rank 4 on 3 layers"), std::string::npos) << sharded.err;
  EXPECT_LT(WorstRelativeDifference(Losses(Run("fsdp")), Losses(Run("ddp"))), 1e-5);
  // The sharded checkpoint resumes in one process with ddp, whose one-file checkpoint then takes
  // the folder's place.
  auto resumed = Train("fsdp", 1, 16, 25, {"trainer.strategy=ddp", lora, "ckpt_path=last"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(Run("fsdp") + "/checkpoints/last.ckpt"));
  EXPECT_EQ(Losses(Run("fsdp")).size(), 25u);
  // On a base from a file, the sharded checkpoint holds the adapters alone, with the digest of
  // the whole frozen model (taken before sharding, not of a rank's pieces): it resumes.
  const std::string base = "+model.init_from=" + Run("ddp") + "/checkpoints/last.ckpt";
  auto based = Train("based", 2, 8, 10, {"trainer.strategy=fsdp", lora, base});
  ASSERT_EQ(based.exit_code, 0) << based.err;
  auto again = Train("based", 2, 8, 15, {"trainer.strategy=fsdp", lora, base, "ckpt_path=last"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(Losses(Run("based")).size(), 15u);
}

TEST_F(FullyShardedTest, Bf16MixedGathersInBf16ReducesInFloat32AndTestsAfterFit) {
  auto reference = Train("ddp", 2, 8, 30, {"trainer.strategy=ddp", "trainer.precision=bf16-mixed"});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  // test=true: after fit the model is whole again and rank 0 tests the best checkpoint (a sharded
  // one, read whole).
  auto sharded = Train("fsdp", 2, 8, 30,
                       {"trainer.strategy=fsdp", "trainer.precision=bf16-mixed", "test=true"});
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  std::string log = ReadFile(Run("fsdp") + "/train.log");
  EXPECT_NE(log.find("(in bf16; gradients reduced in float32)"), std::string::npos) << log;
  // bf16 rounds the weights' copies as autocast does, but LayerNorm's weights too: close, not
  // equal.
  EXPECT_LT(WorstRelativeDifference(Losses(Run("fsdp")), Losses(Run("ddp"))), 5e-3);
  EXPECT_NE(ReadFile(Run("fsdp") + "/test_metrics.yaml").find("test/loss"), std::string::npos);
}

TEST_F(FullyShardedTest, ShardedCheckpointsResumeFromFourToTwoToOneWorker) {
  // The same 16 sequences make each step at every world size, so the weights follow one curve.
  // The learning rate warms up through all 30 steps: it depends on the step only, not on
  // max_steps, which each part of the chain sets to where it stops.
  const std::string lr = "scheduler.warmup_steps=100";
  auto straight = Train("straight", 1, 16, 30, {"trainer.strategy=fsdp", lr});
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  auto four = Train("chain", 4, 4, 10, {"trainer.strategy=fsdp", lr});
  ASSERT_EQ(four.exit_code, 0) << four.err;
  auto two = Train("chain", 2, 8, 20, {"trainer.strategy=fsdp", lr, "ckpt_path=last"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  auto one = Train("chain", 1, 16, 30, {"trainer.strategy=fsdp", lr, "ckpt_path=last"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(ReadFile(Run("chain") + "/train.log").find("resumed from"), std::string::npos);
  // From step 21 on the chain is a one-worker run: its losses are the uninterrupted run's.
  EXPECT_LT(WorstRelativeDifference(Losses(Run("chain")), Losses(Run("straight")), 20), 1e-5);
  // Both checkpoints read whole (the chain's is one piece now, the straight one's too).
  auto a = testing::CheckpointWeights(Run("chain") + "/checkpoints/last.ckpt");
  auto b = testing::CheckpointWeights(Run("straight") + "/checkpoints/last.ckpt");
  ASSERT_FALSE(b.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : b) {
    ASSERT_TRUE(a.count(name)) << name;
    ASSERT_EQ(a[name].sizes(), tensor.sizes()) << name;
    if (!tensor.is_floating_point()) {
      EXPECT_TRUE(torch::equal(a[name], tensor)) << name;
      continue;
    }
    double rel =
        (a[name] - tensor).norm().item<double>() / std::max(tensor.norm().item<double>(), 1e-12);
    // Float32 sums in another order (4, 2 and 1 ranks reduce differently) after 30 steps.
    EXPECT_LT(rel, 1e-4) << name;
  }
  // A sharded checkpoint of 2 read whole: the same parameters as the model, whole shapes.
  auto two_again = Train("two", 2, 8, 10, {"trainer.strategy=fsdp"});
  ASSERT_EQ(two_again.exit_code, 0) << two_again.err;
  auto whole = testing::CheckpointWeights(Run("two") + "/checkpoints/last.ckpt");
  ASSERT_EQ(whole.size(), b.size());
  for (const auto& [name, tensor] : b) EXPECT_EQ(whole[name].sizes(), tensor.sizes()) << name;
}

// With several workers the fsdp model is built in pieces (each worker its rows of each block).
// A whole checkpoint (data parallel's) resumes into those pieces, cut as it is read, and the run
// stays on the curve of an uninterrupted one.
TEST_F(FullyShardedTest, ADataParallelCheckpointResumesIntoAModelBuiltInPieces) {
  const std::string lr = "scheduler.warmup_steps=100";
  auto straight = Train("straight", 2, 8, 10, {"trainer.strategy=ddp", lr});
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  auto first = Train("mixed", 2, 8, 5, {"trainer.strategy=ddp", lr});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_FALSE(std::filesystem::is_directory(Run("mixed") + "/checkpoints/last.ckpt"));
  auto then = Train("mixed", 2, 8, 10, {"trainer.strategy=fsdp", lr, "ckpt_path=last"});
  ASSERT_EQ(then.exit_code, 0) << then.err;
  const std::string log = ReadFile(Run("mixed") + "/train.log");
  EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
  EXPECT_NE(log.find("parameter tensors were built as pieces, never whole"), std::string::npos)
      << log;
  auto losses = Losses(Run("mixed"));
  EXPECT_EQ(losses.size(), 10u);
  EXPECT_LT(WorstRelativeDifference(losses, Losses(Run("straight")), 5), 1e-5);
}

// trainer.fsdp_cpu_offload on the CPU: the pieces are where they were, so the run is the one
// without it, bit for bit, through gradient accumulation (the stashed pieces) and clipping (the
// norm over the pieces). On a GPU it moves them (CudaTest.FullyShardedOffloadsToTheCpu).
TEST_F(FullyShardedTest, CpuOffloadOnTheCpuTrainsTheSameSteps) {
  const std::vector<std::string> fsdp = {"trainer.strategy=fsdp",
                                         "trainer.accumulate_grad_batches=2",
                                         "trainer.gradient_clip_val=0.5"};
  auto plain = Train("plain", 2, 8, 12, fsdp);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::vector<std::string> offload = fsdp;
  offload.push_back("trainer.fsdp_cpu_offload=true");
  auto offloaded = Train("offload", 2, 8, 12, offload);
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  auto losses = Losses(Run("offload"));
  EXPECT_EQ(losses.size(), 12u);
  EXPECT_EQ(losses, Losses(Run("plain")));
  EXPECT_NE(ReadFile(Run("offload") + "/train.log")
                .find("cpu offload: the model is on the CPU already, nothing moves"),
            std::string::npos);
}

TEST_F(FullyShardedTest, WhatCannotWorkIsOneLine) {
  auto unknown = Train("unknown", 2, 8, 5,
                       {"trainer.strategy=fsdp", "trainer.fsdp_sharding_strategy=FULLSHARD"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(ErrorLine(unknown.err).find("fsdp_sharding_strategy"), std::string::npos)
      << unknown.err;
  EXPECT_NE(ErrorLine(unknown.err).find("FULL_SHARD"), std::string::npos) << unknown.err;

  // CPU offload of what data parallel does not cut.
  auto offload_ddp =
      Train("offload_ddp", 2, 8, 5, {"trainer.strategy=ddp", "trainer.fsdp_cpu_offload=true"});
  EXPECT_NE(offload_ddp.exit_code, 0);
  EXPECT_NE(ErrorLine(offload_ddp.err).find("trainer.strategy is not fsdp"), std::string::npos)
      << offload_ddp.err;
  auto offload_no_shard = Train("offload_no_shard", 2, 8, 5,
                                {"trainer.strategy=fsdp", "trainer.fsdp_sharding_strategy=NO_SHARD",
                                 "trainer.fsdp_cpu_offload=true"});
  EXPECT_NE(offload_no_shard.exit_code, 0);
  EXPECT_NE(ErrorLine(offload_no_shard.err).find("NO_SHARD makes none"), std::string::npos)
      << offload_no_shard.err;

  // A model without blocks under the blocks policy.
  auto blockless = Train("blockless", 2, 8, 5,
                         {"trainer.strategy=fsdp", "model=lstm_lm", "model.dim=16",
                          "model.hidden=16", "~model.depth", "~model.heads", "~model.mlp_dim"});
  EXPECT_NE(blockless.exit_code, 0);
  EXPECT_NE(ErrorLine(blockless.err).find("no blocks that fsdp can gather"), std::string::npos)
      << blockless.err;

  // A sharded checkpoint missing a piece, then holding a piece of another run.
  auto first = Train("first", 2, 8, 5, {"trainer.strategy=fsdp"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto other = Train("other", 2, 8, 5, {"trainer.strategy=fsdp"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  const std::string ckpt = Run("first") + "/checkpoints/last.ckpt";
  const std::string piece = ckpt + "/rank-1-of-2.ckpt";
  std::filesystem::rename(piece, piece + ".away");
  auto missing = Train("first", 2, 8, 10, {"trainer.strategy=fsdp", "ckpt_path=last"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(ErrorLine(missing.err).find("rank-1-of-2.ckpt: missing"), std::string::npos)
      << missing.err;
  std::filesystem::copy_file(Run("other") + "/checkpoints/last.ckpt/rank-1-of-2.ckpt", piece);
  auto foreign = Train("first", 2, 8, 10, {"trainer.strategy=fsdp", "ckpt_path=last"});
  EXPECT_NE(foreign.exit_code, 0);
  EXPECT_NE(ErrorLine(foreign.err).find("a piece of another checkpoint"), std::string::npos)
      << foreign.err;
  // Nothing already written was lost: the pieces are where they were.
  EXPECT_TRUE(FileExists(ckpt + "/rank-0-of-2.ckpt"));
  EXPECT_TRUE(FileExists(ckpt + "/meta.json"));
}

}  // namespace
}  // namespace kiln
