// Resuming: an interrupted run (max_steps, a mid-epoch checkpoint, SIGTERM, SIGUSR1, shards,
// each precision) resumed with ckpt_path=last ends with parameters bitwise equal to an
// uninterrupted run, also with another loader thread count; callback state follows its key;
// model_checkpoint's folders and ranking.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/models/model.h"
#include "components/vision/image_ops.h"
#include "lib/base/exit_code.h"
#include "lib/base/status_macros.h"
#include "lib/config/yaml_io.h"
#include "lib/data/datamodule.h"
#include "lib/data/shards/tar_shard.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"
#include "lib/trainer/internal/cuda_graph_step.h"
#include "lib/trainer/metric_collection.h"
#include "lib/trainer/trainer.h"
#include "lib/tuner/lr_finder.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/lazy_archive.h"
#include "lib/weights/sharded_checkpoint.h"
#include "tests/support/process.h"
#include "tests/trainer/fit_fixture.h"

namespace kiln {
namespace resume_test {

using namespace fit_fixture;  // NOLINT

TEST(TrainerResume, MaxStepsInterruptionResumesBitwiseEqual) {
  testing::TempDir a, b;
  RunResult full = Train(a.path(), kThreeEpochs, 2, "");
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  EXPECT_EQ(full.steps, 18);  // 96 samples / 16 = 6 batches, 3 epochs
  // Stop mid-epoch 1 (step 9 of 18), then resume to the end.
  RunResult first = Train(b.path(), std::string(kThreeEpochs) + "max_steps: 9\n", 2, "");
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.steps, 9);
  ASSERT_TRUE(testing::FileExists(b.path() + "/checkpoints/last.ckpt"));
  RunResult resumed = Train(b.path(), kThreeEpochs, 2, "last");
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  EXPECT_EQ(resumed.steps, 18);
  ExpectBitwiseEqual(full.params, resumed.params);
}

// A checkpoint that model_checkpoint saves every N steps, mid-epoch (from the batch-end callback),
// resumes after its batch: bitwise the run that never stopped (it once resumed with that batch
// again, which the kill loop in tests/app/reliability_test.cc found).
TEST(TrainerResume, StepCheckpointMidEpochResumesAfterItsBatchBitwiseEqual) {
  testing::TempDir a, b, c;
  RunResult full = Train(a.path(), kThreeEpochs, 2, "");
  ASSERT_TRUE(full.status.ok()) << full.status;
  auto every4 = Registry<Callback>::Get().Instantiate(
      Yaml(absl::StrCat("_target_: model_checkpoint\ndirpath: ", b.path(),
                        "/steps\nmonitor: ''\nsave_top_k: 0\n",
                        "save_last: true\nevery_n_train_steps: 4\n"),
           "callbacks.model_checkpoint"));
  ASSERT_TRUE(every4.ok()) << every4.status();
  RunResult saving = Train(b.path(), kThreeEpochs, 2, "", {*every4});
  ASSERT_TRUE(saving.status.ok()) << saving.status;
  ExpectBitwiseEqual(full.params, saving.params);
  // Its last.ckpt is step 16 of 18: epoch 2, after batch 4 of 6.
  RunResult resumed = Train(c.path(), kThreeEpochs, 2, b.path() + "/steps/last.ckpt");
  ASSERT_TRUE(resumed.status.ok()) << resumed.status;
  EXPECT_EQ(resumed.steps, 18);
  ExpectBitwiseEqual(full.params, resumed.params);
}

// model_checkpoint every N steps monitoring a validation metric: the checkpoints before the first
// validation have no score and go to last.ckpt only (as Lightning warns and goes on); the later
// ones are ranked by the latest validation, so a best checkpoint exists at the end.
TEST(TrainerResume, StepCheckpointsBeforeTheFirstValidationGoToLastOnly) {
  testing::TempDir a;
  auto every4 = Registry<Callback>::Get().Instantiate(
      Yaml(absl::StrCat("_target_: model_checkpoint\ndirpath: ", a.path(),
                        "/steps\nmonitor: val/acc\nmode: max\n",
                        "save_top_k: 1\nfilename: 'step={step}'\nevery_n_train_steps: 4\n"),
           "callbacks.model_checkpoint"));
  ASSERT_TRUE(every4.ok()) << every4.status();
  RunResult run = Train(a.path(), kThreeEpochs, 2, "", {*every4});
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_TRUE(testing::FileExists(a.path() + "/steps/last.ckpt"));
  // Steps 4 (before the first validation, after step 6), then 8, 12, 16 ranked: one best is kept.
  EXPECT_FALSE(testing::FileExists(a.path() + "/steps/step=4.ckpt"));
  std::string best = testing::ReadFile(a.path() + "/steps/best_model_path.txt");
  EXPECT_TRUE(absl::StrContains(best, "/steps/step=")) << best;
}

// model_checkpoint with neither dirpath nor monitor (Lightning's defaults): the checkpoints go to
// the run's folder (trainer.default_root_dir/checkpoints), and the latest is the best, so
// save_top_k=1 keeps the last epoch's and save_top_k=2 the last two. (Without a monitor the
// earliest once won, and the folder was the working directory's checkpoints/.)
TEST(ModelCheckpoint, WithoutDirpathOrMonitorKeepsTheLatestInTheRunsFolder) {
  for (int k : {1, 2}) {
    testing::TempDir a;
    auto keeper = Registry<Callback>::Get().Instantiate(
        Yaml(absl::StrCat("_target_: model_checkpoint\nsave_top_k: ", k, "\n"),
             "callbacks.model_checkpoint"));
    ASSERT_TRUE(keeper.ok()) << keeper.status();
    RunResult run = Train(a.path(), kThreeEpochs, 2, "", {*keeper});
    ASSERT_TRUE(run.status.ok()) << run.status;
    std::string dir = a.path() + "/checkpoints/";
    EXPECT_TRUE(testing::FileExists(dir + "epoch=2.ckpt")) << k;
    EXPECT_EQ(testing::FileExists(dir + "epoch=1.ckpt"), k == 2) << k;
    EXPECT_FALSE(testing::FileExists(dir + "epoch=0.ckpt")) << k;
    EXPECT_TRUE(testing::FileExists(dir + "last.ckpt")) << k;
    EXPECT_EQ(testing::ReadFile(dir + "best_model_path.txt"), dir + "epoch=2.ckpt\n") << k;
  }
}

// The same from WebDataset shards (data=shards): 100 8x8 images in 10 shards streamed through a
// shuffle buffer, stopped mid-epoch 1 and resumed with another loader thread count.
TEST(TrainerResume, ShardsResumeMidEpochBitwiseEqual) {
  testing::TempDir shards, a, b;
  torch::manual_seed(3);
  torch::Tensor images = torch::randint(0, 256, {100, 8, 8}, torch::kUInt8);
  for (int s = 0; s < 10; ++s) {
    auto writer =
        data::shards::ShardWriter::Create(absl::StrFormat("%s/train-%06d.tar", shards.path(), s));
    ASSERT_TRUE(writer.ok());
    for (int i = s * 10; i < s * 10 + 10; ++i) {
      auto png = data::EncodePng(images[i].unsqueeze(0).contiguous());
      ASSERT_TRUE(png.ok()) << png.status();
      ASSERT_TRUE(
          (*writer)
              ->Add(absl::StrFormat("%06d", i), {{"png", *png}, {"cls", std::to_string(i % 3)}})
              .ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto module = [&](int workers) {
    auto dm = Registry<data::DataModule>::Get().Instantiate(Yaml(
        absl::StrCat("_target_: shards\ntrain_shards: ", shards.path(),
                     "/train-{000000..000009}.tar\nval_shards: ", shards.path(),
                     "/train-00000[0-1].tar\ngrayscale: true\nbatch_size: 16\nshuffle_buffer: 20\n",
                     "num_workers: ", workers, "\ntransforms: {train: [{_target_: to_tensor}, ",
                     "{_target_: random_crop, size: 8, padding: 1}, {_target_: horizontal_flip}], "
                     "eval: [{_target_: to_tensor}]}\n"),
        "data"));
    EXPECT_TRUE(dm.ok()) << dm.status();
    return *dm;
  };
  auto full_data = module(2), first_data = module(2), resumed_data = module(0);
  RunResult full = Train(a.path(), kThreeEpochs, 2, "", {}, false, {}, kMlp, false,
                         "_target_: adamw\nlr: 0.01\n", full_data.get());
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  EXPECT_EQ(full.steps, 21);  // 100 samples / 16 = 7 batches, 3 epochs
  RunResult first = Train(b.path(), std::string(kThreeEpochs) + "max_steps: 10\n", 2, "", {}, false,
                          {}, kMlp, false, "_target_: adamw\nlr: 0.01\n", first_data.get());
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.steps, 10);
  RunResult resumed = Train(b.path(), kThreeEpochs, 2, "last", {}, false, {}, kMlp, false,
                            "_target_: adamw\nlr: 0.01\n", resumed_data.get());
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  EXPECT_EQ(resumed.steps, 21);
  ExpectBitwiseEqual(full.params, resumed.params);
}

TEST(TrainerResume, SigtermMidEpochWritesCheckpointAndResumesBitwiseEqualWithOtherThreadCount) {
  testing::TempDir a, b;
  RunResult full = Train(a.path(), kThreeEpochs, 2, "");
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  RunResult interrupted =
      Train(b.path(), kThreeEpochs, 2, "", {std::make_shared<SigtermAfter>(10)});
  ASSERT_FALSE(interrupted.status.ok());
  EXPECT_EQ(RequestedExitCode(interrupted.status), 128 + SIGTERM);
  EXPECT_NE(std::string(interrupted.status.message()).find("SIGTERM"), std::string::npos)
      << interrupted.status;
  EXPECT_EQ(interrupted.steps, 10);
  // Resume with the loader on the training thread instead of two workers.
  RunResult resumed = Train(b.path(), kThreeEpochs, 0, "last");
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  ExpectBitwiseEqual(full.params, resumed.params);
}

// The model weights in checkpoint `ckpt`, expecting every floating one float32.
std::map<std::string, torch::Tensor> ReadFloat32Weights(const std::string& ckpt) {
  torch::serialize::InputArchive archive;
  EXPECT_TRUE(ReadCheckpoint(ckpt, &archive).ok());
  auto state = ReadModelState(archive, ckpt);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return {};
  EXPECT_FALSE(state->empty());
  for (const auto& [name, tensor] : *state) {
    if (tensor.is_floating_point()) EXPECT_EQ(tensor.scalar_type(), torch::kFloat32) << name;
  }
  return *state;
}

// bf16-mixed: the CNN (convolutions, BatchNorm, AdamW) trains under bf16 autocast, the
// checkpoint holds float32 weights, and a run stopped at step 9 resumes to the same bits as an
// uninterrupted one (autocast's casts are deterministic; nothing is cached across steps).
TEST(TrainerResume, Bf16MixedCheckpointsFloat32AndResumesBitwiseEqual) {
  const std::string bf16 = std::string(kThreeEpochs) + "precision: bf16-mixed\n";
  testing::TempDir a, b, c;
  RunResult full = Train(a.path(), bf16, 2, "", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  RunResult fp32 = Train(c.path(), kThreeEpochs, 2, "", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(fp32.status.ok()) << fp32.status.message();
  // bf16 rounding made a difference (autocast really ran), a small one.
  ASSERT_EQ(full.params.size(), fp32.params.size());
  bool differs = false;
  for (size_t i = 0; i < full.params.size(); ++i) {
    EXPECT_EQ(full.params[i].scalar_type(), torch::kFloat32);
    differs = differs || !torch::equal(full.params[i], fp32.params[i]);
    EXPECT_TRUE(torch::allclose(full.params[i], fp32.params[i], 0.05, 0.02)) << "parameter " << i;
  }
  EXPECT_TRUE(differs);
  RunResult first = Train(b.path(), bf16 + "max_steps: 9\n", 2, "", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(first.status.ok()) << first.status;
  ReadFloat32Weights(b.path() + "/checkpoints/last.ckpt");
  RunResult resumed = Train(b.path(), bf16, 2, "last", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  EXPECT_EQ(resumed.steps, 18);
  ExpectBitwiseEqual(full.params, resumed.params);
}

// 16-mixed: the CNN trains under float16 autocast with loss scaling (here on the CPU, where it is
// emulated), the checkpoint holds the loss scale, and a run stopped at step 9 resumes to the same
// bits as an uninterrupted one.
TEST(TrainerResume, SixteenMixedScalesTheLossAndResumesBitwiseEqual) {
  const std::string fp16 = std::string(kThreeEpochs) + "precision: 16-mixed\n";
  testing::TempDir a, b;
  RunResult full = Train(a.path(), fp16, 2, "", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  EXPECT_EQ(full.steps, 18);
  RunResult first = Train(b.path(), fp16 + "max_steps: 9\n", 2, "", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(first.status.ok()) << first.status;
  torch::serialize::InputArchive archive;
  archive.load_from(b.path() + "/checkpoints/last.ckpt");
  torch::Tensor scale;
  ASSERT_TRUE(archive.try_read("scaler/scale", scale));
  EXPECT_GT(scale.item<double>(), 0);
  EXPECT_LE(scale.item<double>(), 65536.0);
  RunResult resumed = Train(b.path(), fp16, 2, "last", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  EXPECT_EQ(resumed.steps, 18);
  ExpectBitwiseEqual(full.params, resumed.params);
  for (const auto& p : full.params) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
}

// bf16-mixed, channels-last, channel counts the fused BatchNorm -> max-pool -> ReLU kernel takes
// (components/models/batch_norm_pool_relu.h; where the CPU lacks AVX-512 BF16 this is ATen's
// composition): a run stopped at step 9 resumes to the same bits as an uninterrupted one (the
// kernel's sums run over fixed blocks in a fixed order, whatever the threads).
TEST(TrainerResume, Bf16MixedFusedCnnBlockResumesBitwiseEqual) {
  const std::string bf16 =
      std::string(kThreeEpochs) + "precision: bf16-mixed\nchannels_last: true\n";
  testing::TempDir a, b;
  RunResult full = Train(a.path(), bf16, 2, "", {}, false, {}, kSmallCnn8);
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  RunResult first = Train(b.path(), bf16 + "max_steps: 9\n", 2, "", {}, false, {}, kSmallCnn8);
  ASSERT_TRUE(first.status.ok()) << first.status;
  RunResult resumed = Train(b.path(), bf16, 2, "last", {}, false, {}, kSmallCnn8);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  EXPECT_EQ(resumed.steps, 18);
  ExpectBitwiseEqual(full.params, resumed.params);
}

// bf16-true: the CNN trains with bf16 weights and AdamW state, ends close to bf16-mixed (bf16
// weights lose AdamW's smallest updates, so looser than bf16-mixed against float32); the
// checkpoint stores the weights as float32 (exactly the bf16 values), which a float32 model
// loads, and a run stopped at step 9 resumes bitwise equal (the optimizer state is stored bf16).
TEST(TrainerResume, Bf16TrueTrainsBf16WeightsCheckpointsFloat32AndResumesBitwiseEqual) {
  const std::string bf16_true = std::string(kThreeEpochs) + "precision: bf16-true\n";
  testing::TempDir a, b, c;
  RunResult full = Train(a.path(), bf16_true, 2, "", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  EXPECT_EQ(full.steps, 18);
  RunResult mixed = Train(c.path(), std::string(kThreeEpochs) + "precision: bf16-mixed\n", 2, "",
                          {}, false, {}, kSmallCnn);
  ASSERT_TRUE(mixed.status.ok()) << mixed.status.message();
  ASSERT_EQ(full.params.size(), mixed.params.size());
  for (size_t i = 0; i < full.params.size(); ++i) {
    EXPECT_EQ(full.params[i].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::isfinite(full.params[i]).all().item<bool>());
    EXPECT_TRUE(torch::allclose(full.params[i].to(torch::kFloat32), mixed.params[i], 0.1, 0.03))
        << "parameter " << i;
  }
  RunResult first = Train(b.path(), bf16_true + "max_steps: 9\n", 2, "", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(first.status.ok()) << first.status;
  const std::string ckpt = b.path() + "/checkpoints/last.ckpt";
  std::map<std::string, torch::Tensor> state = ReadFloat32Weights(ckpt);
  // A float32 model loads it, holding exactly the bf16 run's weights.
  torch::manual_seed(1);
  Classifier fp32_task(false, kSmallCnn);
  ASSERT_TRUE(fp32_task.Build(config::Config()).ok());
  ASSERT_TRUE(LoadModelState(state, fp32_task.module(), ckpt).ok());
  size_t i = 0;
  for (const auto& p : fp32_task.module().parameters()) {
    ASSERT_LT(i, first.params.size());
    EXPECT_EQ(p.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(p, first.params[i++].to(torch::kFloat32)));
  }
  RunResult resumed = Train(b.path(), bf16_true, 2, "last", {}, false, {}, kSmallCnn);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  EXPECT_EQ(resumed.steps, 18);
  ExpectBitwiseEqual(full.params, resumed.params);
}

// SLURM sends SIGUSR1 before preempting a job: checkpoint, exit 138 (128 + SIGUSR1) so a wrapper
// can requeue, and ckpt_path=last continues exactly.
TEST(TrainerResume, SigusrOnePreemptionCheckpointsAndResumesBitwiseEqual) {
  testing::TempDir a, b;
  RunResult full = Train(a.path(), kThreeEpochs, 2, "");
  ASSERT_TRUE(full.status.ok()) << full.status.message();
  RunResult preempted =
      Train(b.path(), kThreeEpochs, 2, "", {std::make_shared<SigtermAfter>(7, SIGUSR1)});
  ASSERT_FALSE(preempted.status.ok());
  EXPECT_EQ(RequestedExitCode(preempted.status), 128 + SIGUSR1);
  EXPECT_NE(
      std::string(preempted.status.message()).find("interrupted by SIGUSR1 at epoch 1, step 7"),
      std::string::npos)
      << preempted.status;
  RunResult resumed = Train(b.path(), kThreeEpochs, 2, "last");
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  ExpectBitwiseEqual(full.params, resumed.params);
}

// Counts the batches it has seen, and keeps the count in checkpoints under its own state key.
class BatchCounter : public Callback {
 public:
  explicit BatchCounter(std::string name) : name_(std::move(name)) {}
  std::string state_key() const override { return "BatchCounter{" + name_ + "}"; }
  absl::Status OnTrainBatchEnd(Trainer&, const data::Batch&, double) override {
    ++count_;
    return absl::OkStatus();
  }
  void SaveState(torch::serialize::OutputArchive& archive) const override {
    archive.write("count", c10::IValue(count_));
  }
  void LoadState(torch::serialize::InputArchive& archive) override {
    c10::IValue v;
    if (archive.try_read("count", v)) count_ = v.toInt();
  }
  int64_t count() const { return count_; }

 private:
  std::string name_;
  int64_t count_ = 0;
};

// Callback state is keyed by state_key, not list position: a resumed run with a new callback
// in front restores the old one's state into the old one, and the new one starts fresh.
TEST(TrainerResume, CallbackStateFollowsItsStateKeyWhenCallbacksChange) {
  testing::TempDir dir;
  auto counter = std::make_shared<BatchCounter>("a");
  RunResult first =
      Train(dir.path(), std::string(kThreeEpochs) + "max_steps: 9\n", 2, "", {counter});
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(counter->count(), 9);
  auto added = std::make_shared<BatchCounter>("b");
  auto resumed_counter = std::make_shared<BatchCounter>("a");
  RunResult resumed = Train(dir.path(), kThreeEpochs, 2, "last", {added, resumed_counter});
  ASSERT_TRUE(resumed.status.ok()) << resumed.status;
  EXPECT_EQ(resumed.steps, 18);
  EXPECT_EQ(resumed_counter->count(), 18);  // 9 restored + 9 more
  EXPECT_EQ(added->count(), 9);             // not in the checkpoint: from zero
}

TEST(TrainerResume, LastWithNoCheckpointStartsFresh) {
  testing::TempDir a, b;
  RunResult fresh = Train(a.path(), kThreeEpochs, 2, "");
  RunResult last = Train(b.path(), kThreeEpochs, 2, "last");
  ASSERT_TRUE(last.status.ok()) << last.status;
  ExpectBitwiseEqual(fresh.params, last.params);
}

// A worker that holds a piece of a table (rows [first, first + count) of its whole) reads only
// those rows of a sharded checkpoint, across the ranks' pieces and zero past the whole's end, and
// cuts them from a one-file checkpoint's whole tensor; other parameters it reads whole.
// Every key of `a` is in `b` with the same value: tensors bitwise (dtype and shape too), nested
// archives alike.
void ExpectSameArchive(torch::serialize::InputArchive& a, torch::serialize::InputArchive& b,
                       const std::string& where) {
  std::vector<std::string> keys = a.keys(), other = b.keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()),
            std::set<std::string>(other.begin(), other.end()))
      << where;
  for (const std::string& key : keys) {
    torch::Tensor x, y;
    torch::serialize::InputArchive sub_a, sub_b;
    c10::IValue u, v;
    if (a.try_read(key, x)) {
      ASSERT_TRUE(b.try_read(key, y)) << where << key;
      EXPECT_EQ(x.scalar_type(), y.scalar_type()) << where << key;
      EXPECT_TRUE(x.sizes() == y.sizes() && (x.numel() == 0 || x.equal(y))) << where << key;
    } else if (a.try_read(key, sub_a)) {
      ASSERT_TRUE(b.try_read(key, sub_b)) << where << key;
      ExpectSameArchive(sub_a, sub_b, where + key + "/");
    } else if (a.try_read(key, u)) {
      ASSERT_TRUE(b.try_read(key, v)) << where << key;
      EXPECT_EQ(u, v) << where << key;
    }
  }
}

TEST(LazyArchive, ReadsACheckpointAsLibTorchDoesAndRowsAloneFromTheFile) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/trained.ckpt";
  // A model's state, an optimizer's (Adam after a step: per-parameter state and groups), and
  // what else checkpoints hold: strings, ints, lists, a non-contiguous view, an empty tensor,
  // a scalar, bf16 and int64 tensors.
  torch::manual_seed(3);
  torch::nn::Linear fc(4, 5);
  torch::optim::Adam adam(fc->parameters(), torch::optim::AdamOptions(0.1));
  fc(torch::randn({2, 4})).sum().backward();
  adam.step();
  const torch::Tensor table = torch::randn({7, 3});
  ASSERT_TRUE(WriteCheckpoint(path, [&](torch::serialize::OutputArchive& a) {
                WriteCheckpointMeta(a, "mlp", "model:\n  _target_: mlp\n");
                WriteModelState(*fc, a);
                torch::serialize::OutputArchive opt(a.compilation_unit());
                adam.save(opt);
                a.write("optimizer", opt);
                a.write("table", table);
                a.write("columns", table.t());  // strided over the same storage
                a.write("empty", torch::empty({0, 3}));
                a.write("scalar", torch::tensor(2.5));
                a.write("half", torch::arange(6, torch::kBFloat16));
                a.write("counts", torch::arange(5, torch::kInt64));
                a.write("loop/global_step", c10::IValue(int64_t{42}));
                a.write("sizes", c10::IValue(std::vector<int64_t>{3, 1, 4}));
              }).ok());
  auto lazy = LazyArchive::Open(path);
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  const LazyArchive& archive = **lazy;
  // The layout without bytes, then rows straight from the file.
  std::optional<c10::IValue> step = archive.Find({"loop/global_step"});
  ASSERT_TRUE(step && step->isInt());
  EXPECT_EQ(step->toInt(), 42);
  EXPECT_FALSE(archive.Find({"optimizer", "no such key"}).has_value());
  const torch::Tensor unread = archive.Find({"table"})->toTensor();
  EXPECT_EQ(unread.sizes(), table.sizes());
  EXPECT_TRUE(archive.ReadRows(unread, 2, 3).equal(table.narrow(0, 2, 3)));
  EXPECT_TRUE(archive.ReadRows(unread, 7, 0).sizes() == torch::IntArrayRef({0, 3}));
  const torch::Tensor columns = archive.Find({"columns"})->toTensor();
  EXPECT_FALSE(columns.is_contiguous());
  EXPECT_TRUE(archive.ReadRows(columns, 1, 2).equal(table.t().narrow(0, 1, 2)));
  EXPECT_TRUE(archive.Read(archive.Find({"scalar"})->toTensor()).equal(torch::tensor(2.5)));
  EXPECT_THROW(archive.ReadRows(unread, 5, 3), std::runtime_error);
  // The whole archive copied through it is the archive LibTorch reads.
  const std::string copy = dir.path() + "/copy.ckpt";
  ASSERT_TRUE(WriteCheckpoint(copy, [&](torch::serialize::OutputArchive& a) {
                archive.CopyTo(a, [](const std::string&) { return std::nullopt; });
              }).ok());
  torch::serialize::InputArchive original, copied;
  ASSERT_TRUE(ReadCheckpoint(path, &original).ok());
  ASSERT_TRUE(ReadCheckpoint(copy, &copied).ok());
  ExpectSameArchive(original, copied, "");
  ExpectSameArchive(copied, original, "");
  // A replaced tensor, by its path, and the optimizer's state loads from the copy.
  const std::string replaced = dir.path() + "/replaced.ckpt";
  ASSERT_TRUE(WriteCheckpoint(replaced, [&](torch::serialize::OutputArchive& a) {
                archive.CopyTo(a, [](const std::string& at) -> std::optional<torch::Tensor> {
                  if (at == "table") return torch::zeros({1});
                  return std::nullopt;
                });
              }).ok());
  torch::serialize::InputArchive read;
  ASSERT_TRUE(ReadCheckpoint(replaced, &read).ok());
  torch::Tensor t;
  read.read("table", t);
  EXPECT_TRUE(t.equal(torch::zeros({1})));
  torch::serialize::InputArchive opt;
  read.read("optimizer", opt);
  torch::optim::Adam again(fc->parameters(), torch::optim::AdamOptions(0.1));
  again.load(opt);
  // Bad files: one line each, nothing thrown.
  EXPECT_TRUE(absl::IsNotFound(LazyArchive::Open(dir.path() + "/none.ckpt").status()));
  const std::string cut = dir.path() + "/cut.ckpt";
  std::filesystem::copy_file(path, cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(path) / 2);
  auto truncated = LazyArchive::Open(cut);
  ASSERT_FALSE(truncated.ok());
  EXPECT_TRUE(absl::StrContains(truncated.status().message(), "cut.ckpt: not a readable"))
      << truncated.status();
}

TEST(ShardedCheckpoint, AWorkerHoldingPiecesReadsOnlyItsRows) {
  struct Fc : torch::nn::Module {
    Fc() {
      weight = register_parameter("weight", torch::zeros({2, 2}));  // rows of a [3, 2] whole
      bias = register_parameter("bias", torch::zeros({3}));
    }
    torch::Tensor weight, bias;
  };
  struct Net : torch::nn::Module {
    Net() { fc = register_module("fc", std::make_shared<Fc>()); }
    std::shared_ptr<Fc> fc;
  };
  testing::TempDir dir;
  const std::string sharded = dir.path() + "/last.ckpt";
  std::filesystem::create_directories(sharded);
  ShardedCheckpointMeta meta;
  meta.world_size = 2;
  meta.run = "pieces";
  meta.step = 3;
  meta.shapes = {{"fc.weight", {3, 2}}, {"fc.bias", {3}}};
  // Rank r's pieces: 2 rows each of weight (r * 10 + 0..3) and bias, the whole's third row in
  // rank 1's first and its second padding.
  // The weight's optimizer state as row-wise Adagrad keeps it: per row (r * 10 + 0..1), and an
  // empty exp_avg, which is not per row.
  for (int64_t r = 0; r < 2; ++r) {
    std::map<std::string, torch::Tensor> state{
        {"fc.weight", torch::arange(4, torch::kFloat32).view({2, 2}) + 10.0 * r},
        {"fc.bias", torch::full({2}, static_cast<double>(r + 1))}};
    torch::Tensor piece = state.at("fc.weight").clone().requires_grad_();
    torch::optim::Adam adam(std::vector<torch::Tensor>{piece});
    auto rowwise = std::make_unique<torch::optim::AdamParamState>();
    rowwise->step(3);
    rowwise->exp_avg(torch::empty({0}));
    rowwise->exp_avg_sq(torch::arange(2, torch::kFloat32) + 10.0 * r);
    adam.state()[piece.unsafeGetTensorImpl()] = std::move(rowwise);
    ASSERT_TRUE(WriteCheckpoint(sharded + "/" + ShardFileName(r, 2),
                                [&](torch::serialize::OutputArchive& a) {
                                  WriteCheckpointMeta(a, "mlp", "");
                                  WriteModelState(state, a);
                                  torch::serialize::OutputArchive opt(a.compilation_unit());
                                  adam.save(opt);
                                  a.write("optimizer", opt);
                                  a.write("loop/global_step", c10::IValue(meta.step));
                                  WriteShardKeys(a, meta, r, {"fc.weight"});
                                })
                    .ok());
  }
  ASSERT_TRUE(WriteShardedCheckpointMeta(sharded, meta).ok());
  const torch::Tensor whole = torch::tensor({0.f, 1.f, 2.f, 3.f, 10.f, 11.f}).view({3, 2});
  Net net;
  // The checkpoint at `path` into `net`; `read` the rows the reader gave of fc.weight (0: none,
  // they went straight into the parameter).
  auto read_into = [&](const std::string& path, int64_t read) -> absl::Status {
    torch::serialize::InputArchive archive;
    KILN_RETURN_IF_ERROR(ReadCheckpointFor(path, net, &archive));
    KILN_ASSIGN_OR_RETURN(auto state, ReadModelState(archive, path));
    const torch::Tensor& rows = state.at("fc.weight");
    EXPECT_EQ(rows.defined() ? rows.size(0) : 0, read) << path;
    return LoadModelState(state, net, path);
  };
  for (int64_t first : {0, 1, 2}) {
    SetPieceRowsOf([&](const torch::Tensor& p) -> std::optional<PieceRows> {
      if (!p.is_same(net.fc->weight)) return std::nullopt;
      return PieceRows{first, 2, 3};
    });
    const torch::Tensor expected = torch::cat({whole, torch::zeros({1, 2})}).narrow(0, first, 2);
    net.fc->weight.detach().fill_(-1);
    ASSERT_TRUE(read_into(sharded, 0).ok()) << first;  // the piece alone, into the parameter
    EXPECT_TRUE(net.fc->weight.equal(expected)) << first << net.fc->weight;
    {
      // Its optimizer state: the per-row tensor cut to the same rows, the empty one as it was.
      torch::serialize::InputArchive archive, opt, state, param;
      ASSERT_TRUE(ReadCheckpointFor(sharded, net, &archive).ok());
      archive.read("optimizer", opt);
      opt.read("state", state);
      int archives = 0;  // the one parameter's state (beside the archive's own attributes)
      for (const std::string& key : state.keys()) archives += state.try_read(key, param) ? 1 : 0;
      ASSERT_EQ(archives, 1);
      torch::Tensor exp_avg, exp_avg_sq;
      param.read("exp_avg", exp_avg);
      param.read("exp_avg_sq", exp_avg_sq);
      EXPECT_EQ(exp_avg.numel(), 0) << first;
      EXPECT_TRUE(exp_avg_sq.equal(torch::tensor({0.f, 1.f, 10.f, 0.f}).narrow(0, first, 2)))
          << first << exp_avg_sq;
    }
    EXPECT_TRUE(net.fc->bias.equal(torch::tensor({1.f, 1.f, 2.f})));
    // A one-file checkpoint of the whole: cut to the same rows.
    const std::string one_file = dir.path() + "/whole.ckpt";
    ASSERT_TRUE(WriteCheckpoint(one_file, [&](torch::serialize::OutputArchive& a) {
                  WriteCheckpointMeta(a, "mlp", "");
                  WriteModelState({{"fc.weight", whole}, {"fc.bias", torch::ones({3})}}, a);
                }).ok());
    net.fc->weight.detach().fill_(-1);
    ASSERT_TRUE(read_into(one_file, 3).ok());
    EXPECT_TRUE(net.fc->weight.equal(expected)) << first << net.fc->weight;
  }
  {
    // A description claiming more rows than the pieces hold: one line, naming the parameter.
    ShardedCheckpointMeta longer = meta;
    longer.shapes["fc.weight"] = {9, 2};
    ASSERT_TRUE(WriteShardedCheckpointMeta(sharded, longer).ok());
    SetPieceRowsOf([&](const torch::Tensor& p) -> std::optional<PieceRows> {
      if (!p.is_same(net.fc->weight)) return std::nullopt;
      return PieceRows{0, 2, 9};
    });
    torch::serialize::InputArchive archive;
    absl::Status short_pieces = ReadCheckpointFor(sharded, net, &archive);
    EXPECT_TRUE(absl::StrContains(short_pieces.message(), "fc.weight hold 4 rows of its 9"))
        << short_pieces;
    ASSERT_TRUE(WriteShardedCheckpointMeta(sharded, meta).ok());
  }
  SetPieceRowsOf(nullptr);
  // Without pieces the whole is read, and a piece-shaped parameter cannot take it.
  torch::serialize::InputArchive archive;
  ASSERT_TRUE(ReadCheckpointFor(sharded, net, &archive).ok());
  auto state = ReadModelState(archive, sharded);
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->at("fc.weight").equal(whole));
  EXPECT_FALSE(LoadModelState(*state, net, sharded).ok());
}

}  // namespace resume_test
}  // namespace kiln
