// The callbacks that change what trains: backbone_finetuning (frozen bitwise, BatchNorm, resume,
// refused globs), parameter groups with it, weight averaging (EMA by hand, SWA, update_bn,
// resume), and lr_monitor's logged rates.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/models/model.h"
#include "components/vision/image_ops.h"
#include "lib/base/exit_code.h"
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
#include "tests/support/process.h"
#include "tests/trainer/fit_fixture.h"

namespace kiln {
namespace callbacks_test {

using namespace fit_fixture;  // NOLINT

std::shared_ptr<Callback> BackboneFinetuning(const std::string& options) {
  auto c = Registry<Callback>::Get().Instantiate(
      Yaml("_target_: backbone_finetuning\n" + options, "callbacks.bf"));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

// Keeps a copy of the model's parameters and buffers when fitting starts and after each epoch.
class Snapshots : public Callback {
 public:
  absl::Status OnFitStart(Trainer& t) override { return Take(t); }
  absl::Status OnTrainEpochEnd(Trainer& t) override { return Take(t); }
  std::vector<std::map<std::string, torch::Tensor>> taken;

 private:
  absl::Status Take(Trainer& t) {
    std::map<std::string, torch::Tensor> state;
    for (const auto& p : t.task()->module().named_parameters())
      state[p.key()] = p.value().detach().clone();
    for (const auto& b : t.task()->module().named_buffers())
      state[b.key()] = b.value().detach().clone();
    taken.push_back(std::move(state));
    return absl::OkStatus();
  }
};

// Frozen until epoch 2 of 3: the backbone (BatchNorm statistics included, with train_bn=false)
// is bitwise what it was at the start after epochs 0 and 1, while the head trains; in epoch 2 it
// trains at a tenth of the scheduled lr, in a parameter group of its own.
TEST(BackboneFinetuning, FrozenParametersStayBitwiseUnchangedUntilTheUnfreezeEpoch) {
  testing::TempDir dir;
  auto snapshots = std::make_shared<Snapshots>();
  RunResult r =
      Train(dir.path(), kThreeEpochs, 0, "",
            {BackboneFinetuning("params: [conv*, bn*]\nunfreeze_at_epoch: 2\ntrain_bn: false\n"),
             snapshots},
            false, {}, kSmallCnn);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(snapshots->taken.size(), 4u);  // start, epochs 0..2
  const auto& start = snapshots->taken[0];
  for (const auto& [name, t] : start) {
    bool backbone = name.rfind("conv", 0) == 0 || name.rfind("bn", 0) == 0;
    for (size_t epoch = 1; epoch <= 2; ++epoch) {
      EXPECT_EQ(torch::equal(snapshots->taken[epoch].at(name), t), backbone)
          << name << " after epoch " << epoch - 1;
    }
    if (backbone && name.find("num_batches") == std::string::npos) {
      EXPECT_FALSE(torch::equal(snapshots->taken[3].at(name), t))
          << name << " did not train after unfreezing";
    }
  }
  ASSERT_EQ(r.group_lrs.size(), 2u);
  EXPECT_DOUBLE_EQ(r.group_lrs[1], r.group_lrs[0] * 0.1);
}

// With train_bn (Lightning's default) the BatchNorm layers of the backbone keep training.
TEST(BackboneFinetuning, BatchNormLayersTrainWithTrainBn) {
  testing::TempDir dir;
  auto snapshots = std::make_shared<Snapshots>();
  RunResult r =
      Train(dir.path(), "max_epochs: 1\n", 0, "",
            {BackboneFinetuning("params: [conv*, bn*]\nunfreeze_at_epoch: 2\n"), snapshots}, false,
            {}, kSmallCnn);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(
      torch::equal(snapshots->taken[1].at("conv1.weight"), snapshots->taken[0].at("conv1.weight")));
  EXPECT_FALSE(
      torch::equal(snapshots->taken[1].at("bn1.weight"), snapshots->taken[0].at("bn1.weight")));
  EXPECT_FALSE(torch::equal(snapshots->taken[1].at("bn1.running_mean"),
                            snapshots->taken[0].at("bn1.running_mean")));
}

// Interrupted in the frozen phase (step 4, epoch 0) or after the unfreezing (step 15, epoch 2),
// a resumed run ends bitwise where an uninterrupted one does.
TEST(BackboneFinetuning, ResumeInEitherPhaseIsBitwiseExact) {
  const std::string options = "params: [conv*, bn*]\nunfreeze_at_epoch: 2\ntrain_bn: false\n";
  testing::TempDir a;
  RunResult full =
      Train(a.path(), kThreeEpochs, 0, "", {BackboneFinetuning(options)}, false, {}, kSmallCnn);
  ASSERT_TRUE(full.status.ok()) << full.status;
  for (int stop : {4, 15}) {
    testing::TempDir b;
    RunResult first = Train(b.path(), absl::StrCat(kThreeEpochs, "max_steps: ", stop, "\n"), 0, "",
                            {BackboneFinetuning(options)}, false, {}, kSmallCnn);
    ASSERT_TRUE(first.status.ok()) << first.status;
    ASSERT_EQ(first.steps, stop);
    RunResult resumed = Train(b.path(), kThreeEpochs, 0, "last", {BackboneFinetuning(options)},
                              false, {}, kSmallCnn);
    ASSERT_TRUE(resumed.status.ok()) << resumed.status;
    EXPECT_EQ(resumed.steps, 18);
    ExpectBitwiseEqual(full.params, resumed.params);
    EXPECT_EQ(resumed.group_lrs, full.group_lrs) << "stopped at step " << stop;
  }
}

TEST(BackboneFinetuning, GlobsThatFreezeEverythingOrMatchNothingAreRefused) {
  testing::TempDir dir;
  RunResult all =
      Train(dir.path(), kThreeEpochs, 0, "",
            {BackboneFinetuning("params: ['*']\nunfreeze_at_epoch: 1\ntrain_bn: false\n")}, false,
            {}, kSmallCnn);
  ASSERT_FALSE(all.status.ok());
  EXPECT_EQ(std::string(all.status.message()),
            "callbacks.bf.params: [*] freezes every parameter of the model until epoch 1; nothing "
            "would train");
  RunResult none = Train(dir.path(), kThreeEpochs, 0, "",
                         {BackboneFinetuning("params: [backbone.*]\n")}, false, {}, kSmallCnn);
  ASSERT_FALSE(none.status.ok());
  EXPECT_NE(std::string(none.status.message())
                .find("callbacks.bf.params: 'backbone.*' matches no parameter of the model"),
            std::string::npos)
      << none.status;
}

// Parameter groups and layer-wise decay (head.bias in a group of its own at 0.02 without weight
// decay; layers.0, the MLP's one block, at lr x 0.5): interrupted at step 9 and resumed, the run
// ends bitwise where an uninterrupted one does, with the same lr in every group.
TEST(ParamGroups, ResumeIsBitwiseExact) {
  const std::string optimizer =
      "_target_: adamw\nlr: 0.01\nlr_decay: 0.5\nparam_groups: [{params: [head.bias], lr: 0.02, "
      "weight_decay: 0}]\n";
  testing::TempDir a, b;
  RunResult full = Train(a.path(), kThreeEpochs, 0, "", {}, false, {}, kMlp, false, optimizer);
  ASSERT_TRUE(full.status.ok()) << full.status;
  // rest: head.weight (layer 2, x1), layers.0 (layer 1, x0.5); then head.bias.
  ASSERT_EQ(full.group_lrs.size(), 3u);
  EXPECT_DOUBLE_EQ(full.group_lrs[1], full.group_lrs[0] * 0.5);
  EXPECT_DOUBLE_EQ(full.group_lrs[2], full.group_lrs[0] * 2);
  RunResult first = Train(b.path(), std::string(kThreeEpochs) + "max_steps: 9\n", 0, "", {}, false,
                          {}, kMlp, false, optimizer);
  ASSERT_TRUE(first.status.ok()) << first.status;
  RunResult resumed =
      Train(b.path(), kThreeEpochs, 0, "last", {}, false, {}, kMlp, false, optimizer);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status;
  EXPECT_EQ(resumed.steps, 18);
  ExpectBitwiseEqual(full.params, resumed.params);
  EXPECT_EQ(resumed.group_lrs, full.group_lrs);
}

// backbone_finetuning with param_groups: the unfrozen backbone joins the groups the config makes
// for it (conv2 its own group's lr, the rest of the backbone the optimizer's), times lr_factor;
// frozen parameters stay bitwise unchanged, and resuming in either phase is exact.
TEST(ParamGroups, BackboneFinetuningAddsTheBackboneInItsGroups) {
  const std::string optimizer =
      "_target_: adamw\nlr: 0.01\nparam_groups:\n  - {params: ['fc2.*'], lr: 0.02}\n"
      "  - {params: ['conv2.*'], lr: 0.005}\n";
  const std::string backbone = "params: [conv*, bn*]\nunfreeze_at_epoch: 2\ntrain_bn: false\n";
  testing::TempDir a;
  auto snapshots = std::make_shared<Snapshots>();
  RunResult full = Train(a.path(), kThreeEpochs, 0, "", {BackboneFinetuning(backbone), snapshots},
                         false, {}, kSmallCnn, false, optimizer);
  ASSERT_TRUE(full.status.ok()) << full.status;
  EXPECT_TRUE(
      torch::equal(snapshots->taken[2].at("conv2.weight"), snapshots->taken[0].at("conv2.weight")));
  EXPECT_FALSE(
      torch::equal(snapshots->taken[3].at("conv2.weight"), snapshots->taken[0].at("conv2.weight")));
  ASSERT_EQ(full.group_lrs.size(), 4u);
  for (int stop : {4, 15}) {
    testing::TempDir b;
    RunResult part = Train(b.path(), absl::StrCat(kThreeEpochs, "max_steps: ", stop, "\n"), 0, "",
                           {BackboneFinetuning(backbone)}, false, {}, kSmallCnn, false, optimizer);
    ASSERT_TRUE(part.status.ok()) << part.status;
    if (stop == 15) {
      // fc1 (the rest), fc2; added at epoch 2: conv1, bn1, bn2 (the rest x 0.1), conv2 (0.005 x
      // 0.1).
      ASSERT_EQ(part.group_lrs.size(), 4u);
      EXPECT_GT(part.group_lrs[0], 0);
      EXPECT_NEAR(part.group_lrs[1] / part.group_lrs[0], 2, 1e-12);
      EXPECT_NEAR(part.group_lrs[2] / part.group_lrs[0], 0.1, 1e-12);
      EXPECT_NEAR(part.group_lrs[3] / part.group_lrs[0], 0.05, 1e-12);
    }
    RunResult resumed = Train(b.path(), kThreeEpochs, 0, "last", {BackboneFinetuning(backbone)},
                              false, {}, kSmallCnn, false, optimizer);
    ASSERT_TRUE(resumed.status.ok()) << resumed.status;
    ExpectBitwiseEqual(full.params, resumed.params);
    EXPECT_EQ(resumed.group_lrs, full.group_lrs) << "stopped at step " << stop;
  }
}

std::shared_ptr<Callback> WeightAveraging(const std::string& options) {
  auto c = Registry<Callback>::Get().Instantiate(
      Yaml("_target_: weight_averaging\n" + options, "callbacks.wa"));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

// Keeps a copy of the model's parameters at the start and after every optimizer step.
class StepSnapshots : public Callback {
 public:
  absl::Status OnFitStart(Trainer& t) override { return Take(t); }
  absl::Status OnTrainBatchEnd(Trainer& t, const data::Batch&, double) override { return Take(t); }
  std::vector<std::vector<torch::Tensor>> taken;

 private:
  absl::Status Take(Trainer& t) {
    taken.emplace_back();
    for (const auto& p : t.task()->module().parameters())
      taken.back().push_back(p.detach().clone());
    return absl::OkStatus();
  }
};

// EMA after each of the 18 steps, by hand: avg = d avg + (1 - d) w with d = min(0.9, (1+n)/(10+n));
// the model ends with the average (evaluate_averaged), and the checkpoint of a run stopped at
// step 9 holds the average as its model.
TEST(WeightAveraging, EmaIsTheHandComputedAverageAndTheCheckpointsModel) {
  testing::TempDir dir;
  auto steps = std::make_shared<StepSnapshots>();
  RunResult r = Train(dir.path(), kThreeEpochs, 0, "", {steps, WeightAveraging("decay: 0.9\n")});
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(steps->taken.size(), 19u);
  std::vector<torch::Tensor> avg = steps->taken[0];
  for (size_t n = 0; n < 18; ++n) {
    double d = std::min(0.9, (1.0 + n) / (10.0 + n));
    for (size_t i = 0; i < avg.size(); ++i) avg[i] = avg[i] * d + steps->taken[n + 1][i] * (1 - d);
  }
  ASSERT_EQ(avg.size(), r.params.size());
  for (size_t i = 0; i < avg.size(); ++i) {
    EXPECT_TRUE(torch::allclose(r.params[i], avg[i], 1e-5, 1e-6)) << "parameter " << i;
    EXPECT_FALSE(torch::allclose(r.params[i], steps->taken[18][i], 1e-5, 1e-6))
        << "parameter " << i;
  }
  testing::TempDir b;
  RunResult stopped = Train(b.path(), std::string(kThreeEpochs) + "max_steps: 9\n", 0, "",
                            {WeightAveraging("decay: 0.9\n")});
  ASSERT_TRUE(stopped.status.ok()) << stopped.status;
  torch::serialize::InputArchive archive;
  ASSERT_TRUE(ReadCheckpoint(b.path() + "/checkpoints/last.ckpt", &archive).ok());
  auto state = ReadModelState(archive, "last.ckpt");
  ASSERT_TRUE(state.ok()) << state.status();
  for (size_t i = 0; i < stopped.names.size(); ++i) {
    EXPECT_TRUE(torch::equal(state->at(stopped.names[i]), stopped.params[i])) << stopped.names[i];
  }
}

// Stopped mid-epoch (step 9) or in the last epoch (15) and resumed, EMA and SWA runs end bitwise
// where uninterrupted ones do, the training weights and the averages both.
TEST(WeightAveraging, ResumeIsBitwiseExact) {
  for (const std::string options :
       {"decay: 0.9\n", "decay: 0.9\nevaluate_averaged: false\n",
        "mode: swa\nswa_epoch_start: 1\nswa_lrs: 0.002\nannealing_epochs: 1\n"}) {
    testing::TempDir a;
    RunResult full = Train(a.path(), kThreeEpochs, 0, "", {WeightAveraging(options)});
    ASSERT_TRUE(full.status.ok()) << full.status;
    for (int stop : {9, 15}) {
      testing::TempDir b;
      RunResult first = Train(b.path(), absl::StrCat(kThreeEpochs, "max_steps: ", stop, "\n"), 0,
                              "", {WeightAveraging(options)});
      ASSERT_TRUE(first.status.ok()) << first.status;
      RunResult resumed = Train(b.path(), kThreeEpochs, 0, "last", {WeightAveraging(options)});
      ASSERT_TRUE(resumed.status.ok()) << resumed.status;
      EXPECT_EQ(resumed.steps, 18);
      ExpectBitwiseEqual(full.params, resumed.params);
      EXPECT_EQ(resumed.group_lrs, full.group_lrs) << options << " stopped at step " << stop;
    }
  }
}

// SWA from epoch 1 of 3: the model ends as the mean of the weights after epochs 1 and 2, and the
// lr anneals to swa_lrs (linear over 1 epoch: reached in epoch 2), the scheduler stopped.
TEST(WeightAveraging, SwaAveragesEpochEndsAndAnnealsTheLr) {
  testing::TempDir dir;
  auto snapshots = std::make_shared<Snapshots>();
  RunResult r =
      Train(dir.path(), kThreeEpochs, 0, "",
            {snapshots,
             WeightAveraging("mode: swa\nswa_epoch_start: 1\nswa_lrs: 0.002\nannealing_epochs: 1\n"
                             "annealing_strategy: linear\n")});
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(snapshots->taken.size(), 4u);
  for (size_t i = 0; i < r.names.size(); ++i) {
    torch::Tensor mean =
        (snapshots->taken[2].at(r.names[i]) + snapshots->taken[3].at(r.names[i])) / 2;
    EXPECT_TRUE(torch::allclose(r.params[i], mean, 1e-5, 1e-6)) << r.names[i];
    EXPECT_FALSE(torch::allclose(r.params[i], snapshots->taken[3].at(r.names[i]), 1e-5, 1e-6))
        << r.names[i];
  }
  ASSERT_EQ(r.group_lrs.size(), 1u);
  EXPECT_DOUBLE_EQ(r.group_lrs[0], 0.002);
}

TEST(WeightAveraging, SwaStartingAfterTheLastEpochIsRefused) {
  testing::TempDir dir;
  RunResult r =
      Train(dir.path(), kThreeEpochs, 0, "", {WeightAveraging("mode: swa\nswa_epoch_start: 3\n")});
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(std::string(r.status.message()),
            "callbacks.wa.swa_epoch_start: 3 is not before trainer.max_epochs=3; SWA would average "
            "nothing");
}

// update_bn: after SWA on the CNN, the BatchNorm statistics are the ones of one pass over the
// training data with the averaged weights, not the last training step's.
TEST(WeightAveraging, SwaUpdateBnRecomputesBatchNormStatistics) {
  // The model's state once every fit-end callback before it has run.
  struct AtFitEnd : Callback {
    absl::Status OnFitEnd(Trainer& t) override {
      for (const auto& b : t.task()->module().named_buffers())
        state[b.key()] = b.value().detach().clone();
      return absl::OkStatus();
    }
    std::map<std::string, torch::Tensor> state;
  };
  for (bool update_bn : {false, true}) {
    testing::TempDir dir;
    auto snapshots = std::make_shared<Snapshots>();
    auto end = std::make_shared<AtFitEnd>();
    RunResult r = Train(dir.path(), kThreeEpochs, 0, "",
                        {snapshots,
                         WeightAveraging(absl::StrCat("mode: swa\nswa_epoch_start: 1\nupdate_bn: ",
                                                      update_bn ? "true" : "false", "\n")),
                         end},
                        false, {}, kSmallCnn);
    ASSERT_TRUE(r.status.ok()) << r.status;
    // Without update_bn the statistics are the last training step's; with it, recomputed.
    EXPECT_EQ(torch::equal(end->state.at("bn1.running_mean"),
                           snapshots->taken.back().at("bn1.running_mean")),
              !update_bn);
    EXPECT_EQ(torch::equal(end->state.at("bn2.running_var"),
                           snapshots->taken.back().at("bn2.running_var")),
              !update_bn);
  }
}

TEST(LearningRateMonitor, LogsTheScheduledRateAfterEveryStepOrEpoch) {
  testing::TempDir dir;
  auto steps = std::make_shared<RecordingLogger>();
  auto r = Train(dir.path(), kThreeEpochs, 0, "", {BuildCallback("_target_: lr_monitor\n")}, false,
                 {steps});
  ASSERT_TRUE(r.status.ok()) << r.status;
  // 96 samples in batches of 16: 6 steps an epoch. The trainer's own "lr" is the first group's.
  auto monitored = steps->Values("lr-AdamW");
  ASSERT_EQ(monitored.size(), 18u);
  EXPECT_EQ(monitored, steps->Values("lr"));
  EXPECT_EQ(monitored.front().first, 1);
  EXPECT_LT(monitored.front().second, monitored[2].second);  // warming up
  EXPECT_LT(monitored.back().second, monitored[3].second);   // decaying
  auto epochs = std::make_shared<RecordingLogger>();
  r = Train(dir.path() + "/e", kThreeEpochs, 0, "",
            {BuildCallback("_target_: lr_monitor\nlogging_interval: epoch\n")}, false, {epochs});
  ASSERT_TRUE(r.status.ok()) << r.status;
  auto per_epoch = epochs->Values("lr-AdamW");
  ASSERT_EQ(per_epoch.size(), 3u);
  EXPECT_EQ(per_epoch[1], monitored[11]);  // after step 12
  auto bad = Registry<Callback>::Get().Instantiate(
      Yaml("_target_: lr_monitor\nlogging_interval: batch\n", "callbacks.lr"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message())
                .find("option 'callbacks.lr.logging_interval' of callback 'lr_monitor' must be one "
                      "of: step, epoch"),
            std::string::npos);
}

// With parameter groups lr_monitor logs each one, lr-AdamW/pgN, every group following the
// schedule from its own base lr.
TEST(LearningRateMonitor, LogsEveryParameterGroup) {
  testing::TempDir dir;
  auto steps = std::make_shared<RecordingLogger>();
  auto r = Train(dir.path(), kThreeEpochs, 0, "", {BuildCallback("_target_: lr_monitor\n")}, false,
                 {steps}, kMlp, false,
                 "_target_: adamw\nlr: 0.01\nparam_groups: [{params: [head.*], lr: 0.03}]\n");
  ASSERT_TRUE(r.status.ok()) << r.status;
  auto rest = steps->Values("lr-AdamW/pg0");
  auto head = steps->Values("lr-AdamW/pg1");
  ASSERT_EQ(rest.size(), 18u);
  ASSERT_EQ(head.size(), 18u);
  EXPECT_TRUE(steps->Values("lr-AdamW").empty());
  EXPECT_EQ(rest, steps->Values("lr"));
  EXPECT_DOUBLE_EQ(rest[2].second, 0.01);  // step 3: the end of the warmup
  for (size_t i = 0; i < rest.size(); ++i)
    EXPECT_NEAR(head[i].second, 3 * rest[i].second, 1e-15) << "step " << i + 1;
}

}  // namespace callbacks_test
}  // namespace kiln
