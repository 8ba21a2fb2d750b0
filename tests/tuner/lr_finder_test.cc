// The learning-rate finder: the sweep restores the model bitwise and the fit after it is the fit
// without it, one loss per optimizer step with accumulation, divergence, bad options.
#include "lib/tuner/lr_finder.h"

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
#include "lib/weights/checkpoint.h"
#include "tests/support/process.h"
#include "tests/trainer/fit_fixture.h"

namespace kiln {
namespace lr_finder_test {

using namespace fit_fixture;  // NOLINT

// kiln tune lr_find's sweep (lr_finder.h) on the Train() setup, then the fit Train() runs.
struct LrFindRun {
  absl::StatusOr<LrFindResult> result;
  std::vector<torch::Tensor> before, after_sweep, after_fit;  // parameters, then buffers
  bool gradients_cleared = true;
};

std::vector<torch::Tensor> ModuleState(torch::nn::Module& module) {
  std::vector<torch::Tensor> state;
  for (const auto& p : module.parameters()) state.push_back(p.detach().clone());
  for (const auto& b : module.buffers()) state.push_back(b.detach().clone());
  return state;
}

LrFindRun FindThenFit(const std::string& root, const std::string& trainer_yaml,
                      const std::string& lr_find_yaml, bool poison = false,
                      int64_t poison_batch = 2, const std::string& model_yaml = kMlp) {
  LrFindRun run;
  auto options = TrainerOptions::FromConfig(
      Yaml(trainer_yaml + "default_root_dir: " + root +
               "\nnum_threads: 1\nenable_progress_bar: false\nnum_sanity_val_steps: 0\n",
           "trainer"));
  auto lr_find = LrFindOptions::FromConfig(Yaml("tuner:\n  lr_find:\n" + lr_find_yaml, "job"));
  EXPECT_TRUE(options.ok() && lr_find.ok()) << options.status() << lr_find.status();
  torch::manual_seed(1);
  Classifier task(poison, model_yaml, /*count_batches=*/false, poison_batch);
  EXPECT_TRUE(task.Build(config::Config()).ok());
  SyntheticImages data(0);
  auto optimizer = Registry<OptimizerFactory>::Get().Instantiate(
      Yaml("_target_: adamw\nlr: 0.01\n", "optimizer"));
  auto scheduler = Registry<Scheduler>::Get().Instantiate(
      Yaml("_target_: cosine_with_warmup\nwarmup_steps: 3\ntotal_steps: 18\n", "scheduler"));
  FitInputs in;
  in.task = &task;
  in.data = &data;
  in.optimizer = *optimizer;
  in.scheduler = *scheduler;
  in.seed = 99;
  in.model_name = "mlp";
  run.before = ModuleState(task.module());
  run.result = FindLearningRate(*options, in, *lr_find);
  run.after_sweep = ModuleState(task.module());
  for (const auto& p : task.module().parameters()) run.gradients_cleared &= !p.grad().defined();
  if (!run.result.ok() || poison) return run;
  Trainer trainer(*options, {}, {});
  absl::Status fitted = trainer.Fit(in);
  EXPECT_TRUE(fitted.ok()) << fitted;
  for (const auto& p : task.module().parameters()) run.after_fit.push_back(p.detach().clone());
  return run;
}

TEST(LrFinder, SweepsTheLrRestoresTheModelBitwiseAndTheFitAfterItIsTheFitWithoutIt) {
  testing::TempDir dir;
  // max_lr 0.1 and no early stop: all 20 steps (3 epochs of 6 batches and 2 more).
  LrFindRun run =
      FindThenFit(dir.path() + "/tuned", kThreeEpochs,
                  "    num_training: 20\n    min_lr: 1.0e-5\n    max_lr: 0.1\n    skip_begin: 2\n"
                  "    early_stop_threshold: null\n");
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  const LrFindResult& r = *run.result;
  ASSERT_EQ(r.lrs.size(), 20u);
  EXPECT_TRUE(r.stopped_early.empty());
  EXPECT_DOUBLE_EQ(r.lrs.front(), 1e-5);
  EXPECT_NEAR(r.lrs.back(), 0.1, 1e-12);
  for (size_t i = 1; i < r.lrs.size(); ++i) {
    EXPECT_NEAR(r.lrs[i] / r.lrs[i - 1], std::pow(1e4, 1.0 / 19), 1e-9)
        << i;  // evenly spaced on a log scale
  }
  // The smoothed loss: the bias-corrected moving average of the losses, by hand.
  double average = 0;
  for (size_t i = 0; i < r.losses.size(); ++i) {
    average = 0.98 * average + (1 - 0.98) * r.losses[i];
    EXPECT_DOUBLE_EQ(r.smoothed[i], average / (1 - std::pow(0.98, static_cast<double>(i + 1))));
  }
  ASSERT_TRUE(r.suggestion.has_value());
  EXPECT_EQ(*r.suggestion, *SteepestDescent(r.lrs, r.smoothed, 2, 1, /*log_scale=*/true));
  EXPECT_GE(*r.suggestion, 2u);
  EXPECT_LT(*r.suggestion, 19u);
  // Model restored bitwise, gradients as they were (none), and the fit that follows ends where a
  // fit without the sweep ends; no checkpoint was left by the sweep.
  ExpectBitwiseEqual(run.before, run.after_sweep);
  EXPECT_TRUE(run.gradients_cleared);
  EXPECT_FALSE(testing::FileExists(dir.path() + "/tuned/checkpoints/last.ckpt"));
  RunResult plain = Train(dir.path() + "/plain", kThreeEpochs, 0, "");
  ExpectBitwiseEqual(plain.params, run.after_fit);
}

TEST(LrFinder, RecordsOneLossPerOptimizerStepWithGradientAccumulationAndStopsOnDivergence) {
  testing::TempDir dir;
  // Two micro-batches per step: 8 steps take 16 batches.
  LrFindRun run =
      FindThenFit(dir.path() + "/acc", std::string(kThreeEpochs) + "accumulate_grad_batches: 2\n",
                  "    num_training: 8\n    min_lr: 1.0e-4\n    max_lr: 1.0e-2\n    skip_begin: "
                  "1\n    mode: linear\n");
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  ASSERT_EQ(run.result->lrs.size(), 8u);
  EXPECT_NEAR(run.result->lrs[1] - run.result->lrs[0], (1e-2 - 1e-4) / 7, 1e-15);  // linear
  ExpectBitwiseEqual(run.before, run.after_sweep);
  // An lr of 1e6 diverges: the sweep stops early on the smoothed loss (or a non-finite one), and a
  // suggestion needs more points than it got.
  run = FindThenFit(dir.path() + "/diverge", kThreeEpochs,
                    "    num_training: 60\n    min_lr: 1.0\n    max_lr: 1.0e+6\n");
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_LT(run.result->lrs.size(), 60u);
  EXPECT_FALSE(run.result->stopped_early.empty());
  ExpectBitwiseEqual(run.before, run.after_sweep);
  // A non-finite loss on batch 2 ends the sweep there, recorded as nan.
  run = FindThenFit(dir.path() + "/nan", kThreeEpochs, "    num_training: 20\n    skip_begin: 2\n",
                    /*poison=*/true);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  ASSERT_EQ(run.result->lrs.size(), 3u);
  EXPECT_TRUE(std::isnan(run.result->losses[2]));
  EXPECT_NE(run.result->stopped_early.find("the loss is nan"), std::string::npos)
      << run.result->stopped_early;
  EXPECT_FALSE(run.result->suggestion.has_value());
  ExpectBitwiseEqual(run.before, run.after_sweep);
  // ... and on the very first step it is an error, the model still restored.
  run = FindThenFit(dir.path() + "/nan0", kThreeEpochs, "    num_training: 20\n", /*poison=*/true,
                    /*poison_batch=*/0);
  ASSERT_FALSE(run.result.ok());
  EXPECT_NE(std::string(run.result.status().message()).find("the loss is nan at the first step"),
            std::string::npos)
      << run.result.status();
  ExpectBitwiseEqual(run.before, run.after_sweep);
}

TEST(LrFinder, BadOptionsAreOneLineNamingTheKey) {
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"    min_lr: 0.1\n    max_lr: 0.01\n", "'tuner.lr_find.max_lr'"},
           {"    min_lr: 0.1\n    max_lr: 0.1\n", "'tuner.lr_find.max_lr'"},
           {"    num_training: 12\n", "'tuner.lr_find.num_training'"},
           {"    min_lr: 0\n", "'tuner.lr_find.min_lr'"},
           {"    mode: cosine\n", "'tuner.lr_find.mode'"},
           {"    max_lrr: 1\n", "max_lr"}}) {
    auto o = LrFindOptions::FromConfig(Yaml("tuner:\n  lr_find:\n" + yaml, "job"));
    ASSERT_FALSE(o.ok()) << yaml;
    std::string m(o.status().message());
    EXPECT_NE(m.find(key), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  auto defaults = LrFindOptions::FromConfig(Yaml("seed: 1\n", "job"));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->num_training, 100);
  EXPECT_EQ(defaults->min_lr, 1e-8);
  EXPECT_EQ(defaults->max_lr, 1.0);
  EXPECT_EQ(*defaults->early_stop_threshold, 4.0);
}

}  // namespace lr_finder_test
}  // namespace kiln
