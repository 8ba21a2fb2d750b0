// The trainer's contracts: channels-last and on-device clipping train the same model, a NaN
// loss stops (or skips its step) without a checkpoint, gradient clipping bounds each step, bad
// checkpoints and options are refused in one line, the loader's errors name their sample, the
// epoch's training metrics, devices, collectives, the timer and min_epochs.
#include "lib/trainer/trainer.h"

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
#include "lib/trainer/internal/cuda_module.h"
#include "lib/trainer/metric_collection.h"
#include "lib/tuner/lr_finder.h"
#include "lib/weights/checkpoint.h"
#include "tests/support/process.h"
#include "tests/trainer/fit_fixture.h"

namespace kiln {
namespace trainer_test {

using namespace fit_fixture;  // NOLINT

// trainer.channels_last: the CNN's 4-D weights end in NHWC order (even the one-channel first
// convolution, whose NCHW strides also count as "channels-last contiguous") and training reaches
// the same parameters as in NCHW order, up to float rounding.
// trainer.cuda_graphs clips gradients with device work alone (no host read, so it captures): the
// result is torch's clip_grad_norm_ and clip_grad_value_, a gradient left out where it is none.
TEST(CudaGraphs, ClippingOnTheDeviceEqualsTorchs) {
  for (double max_norm : {0.5, 100.0}) {  // scaled down, and left as it is
    torch::manual_seed(9);
    std::vector<torch::Tensor> mine{torch::randn({4, 5}), torch::randn({3}), torch::randn({2})},
        theirs;
    for (auto& p : mine) {
      p.requires_grad_();
      p.mutable_grad() = torch::randn_like(p) * 3;
      theirs.push_back(p.detach().clone().requires_grad_());
      theirs.back().mutable_grad() = p.grad().clone();
    }
    mine[2].mutable_grad() = torch::Tensor();
    theirs[2].mutable_grad() = torch::Tensor();
    ClipGradientsOnDevice(mine, max_norm, /*by_norm=*/true);
    torch::nn::utils::clip_grad_norm_(theirs, max_norm);
    for (size_t i = 0; i < 2; ++i)
      EXPECT_TRUE(torch::allclose(mine[i].grad(), theirs[i].grad(), 1e-6, 1e-7)) << max_norm;
    EXPECT_FALSE(mine[2].grad().defined());
    if (max_norm > 10) EXPECT_TRUE(torch::equal(mine[0].grad(), theirs[0].grad()));
    ClipGradientsOnDevice(mine, 0.25, /*by_norm=*/false);
    torch::nn::utils::clip_grad_value_(theirs, 0.25);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(mine[i].grad(), theirs[i].grad()));
  }
}

TEST(Trainer, ChannelsLastTrainsTheSameModelInNhwcOrder) {
  std::vector<std::vector<torch::Tensor>> params;
  for (bool channels_last : {false, true}) {
    testing::TempDir dir;
    auto options = TrainerOptions::FromConfig(Yaml(
        absl::StrCat(
            "max_epochs: 1\nnum_threads: 1\nenable_progress_bar: false\nnum_sanity_val_steps: 0\n"
            "limit_val_batches: 0\ndefault_root_dir: ",
            dir.path(), "\nchannels_last: ", channels_last ? "true" : "false", "\n"),
        "trainer"));
    ASSERT_TRUE(options.ok()) << options.status();
    torch::manual_seed(1);
    Classifier task(false,
                    "_target_: cnn\nin_channels: 1\nchannels: [4, 8]\ninput_size: 8\nhidden: "
                    "16\nnum_classes: 3\n");
    ASSERT_TRUE(task.Build(config::Config()).ok());
    SyntheticImages data(0);
    auto optimizer = Registry<OptimizerFactory>::Get().Instantiate(
        Yaml("_target_: sgd\nlr: 0.05\n", "optimizer"));
    ASSERT_TRUE(optimizer.ok());
    Trainer trainer(*options, {}, {});
    FitInputs in;
    in.task = &task;
    in.data = &data;
    in.optimizer = *optimizer;
    in.seed = 5;
    in.model_name = "cnn";
    ASSERT_TRUE(trainer.Fit(in).ok());
    EXPECT_EQ(trainer.global_step(), 6);
    params.emplace_back();
    for (const auto& item : task.module().named_parameters()) {
      const std::string& name = item.key();
      const torch::Tensor& p = item.value();
      if (p.dim() == 4) {
        // NHWC: the channel dimension is the innermost one.
        EXPECT_EQ(p.stride(1) == 1, channels_last) << name << " strides " << p.strides();
      }
      params.back().push_back(p.detach().contiguous().clone());
    }
  }
  ASSERT_EQ(params[0].size(), params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i) {
    EXPECT_FALSE(torch::equal(params[0][i], torch::zeros_like(params[0][i])));
    EXPECT_TRUE(torch::allclose(params[0][i], params[1][i], 1e-4, 1e-5)) << "parameter " << i;
  }
}

// Whether the loss is read before the backward (a task with TrainingStep alone) or after it (a
// task with TrainingLoss), a nan loss stops the run before its optimizer step, in one line and
// without a checkpoint, or skips that step and drops the gradients it left.
TEST(Trainer, NanLossStopsWithAMessageAndNoCheckpoint) {
  for (bool whole_step : {false, true}) {
    testing::TempDir dir;
    RunResult r = Train(dir.path(), kThreeEpochs, 2, "", {}, /*poison=*/true, {}, kMlp, false,
                        "_target_: adamw\nlr: 0.01\n", nullptr, whole_step);
    ASSERT_FALSE(r.status.ok());
    std::string m(r.status.message());
    EXPECT_NE(m.find("loss is nan at epoch 0, batch 2"), std::string::npos) << m;
    EXPECT_FALSE(testing::FileExists(dir.path() + "/checkpoints/last.ckpt"));
    EXPECT_EQ(r.steps, 2) << whole_step;
    for (const auto& p : r.params) EXPECT_TRUE(torch::isfinite(p).all().item<bool>()) << whole_step;
  }
}

TEST(Trainer, NanLossCanBeSkipped) {
  std::vector<std::vector<torch::Tensor>> params;
  for (bool whole_step : {false, true}) {
    testing::TempDir dir;
    RunResult r =
        Train(dir.path(), std::string(kThreeEpochs) + "on_nonfinite_loss: skip\n", 2, "", {}, true,
              {}, kMlp, false, "_target_: adamw\nlr: 0.01\n", nullptr, whole_step);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.steps, 15);  // batch 2 of each epoch skipped
    for (const auto& p : r.params) EXPECT_TRUE(torch::isfinite(p).all().item<bool>()) << whole_step;
    params.push_back(r.params);
  }
  // The same arithmetic either way: the skipped backward's gradients are gone before the next step.
  ExpectBitwiseEqual(params[0], params[1]);
}

// Records the learning rate each optimizer step uses and the parameters after each step.
class StepUpdates : public Callback {
 public:
  absl::Status OnFitStart(Trainer& t) override { return Take(t); }
  absl::Status OnBeforeOptimizerStep(Trainer& t) override {
    lrs.push_back(t.optimizer()->param_groups()[0].options().get_lr());
    return absl::OkStatus();
  }
  absl::Status OnTrainBatchEnd(Trainer& t, const data::Batch&, double) override { return Take(t); }
  std::vector<double> lrs;
  std::vector<torch::Tensor> params;  // all parameters flattened into one vector, per step

 private:
  absl::Status Take(Trainer& t) {
    std::vector<torch::Tensor> flat;
    for (const auto& p : t.task()->module().parameters()) flat.push_back(p.detach().flatten());
    params.push_back(torch::cat(flat).to(torch::kFloat64));
    return absl::OkStatus();
  }
};

// trainer.gradient_clip_val with plain SGD: each step moves the parameters by lr times the clipped
// gradient, so by norm the update's norm is lr x 0.001 (the gradients are far larger), and by value
// no coordinate moves more than lr x 0.0001 while some move exactly that much.
TEST(Trainer, GradientClippingBoundsEachStepsUpdate) {
  for (const std::string algorithm : {"norm", "value"}) {
    const double clip = algorithm == "norm" ? 1e-3 : 1e-4;
    testing::TempDir dir;
    auto updates = std::make_shared<StepUpdates>();
    RunResult r =
        Train(dir.path(),
              absl::StrCat("max_epochs: 1\nmax_steps: 4\ngradient_clip_val: ", clip,
                           "\ngradient_clip_algorithm: ", algorithm, "\n"),
              0, "", {updates}, false, {}, kMlp, false, "_target_: sgd\nlr: 0.5\nmomentum: 0\n");
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(updates->lrs.size(), 4u);
    ASSERT_EQ(updates->params.size(), 5u);
    int checked = 0;
    for (size_t n = 0; n < 4; ++n) {
      const double lr = updates->lrs[n];
      if (lr <= 0) continue;
      torch::Tensor step = (updates->params[n + 1] - updates->params[n]).abs() / lr;
      if (algorithm == "norm") {
        EXPECT_NEAR(step.norm().item<double>(), clip, clip * 1e-3) << "step " << n;
      } else {
        EXPECT_LE(step.max().item<double>(), clip * (1 + 1e-2)) << "step " << n;
        EXPECT_NEAR(step.max().item<double>(), clip, clip * 1e-2) << "step " << n;
      }
      ++checked;
    }
    EXPECT_GE(checked, 3) << algorithm;
  }
}

TEST(Trainer, CorruptOrForeignCheckpointIsRefused) {
  testing::TempDir dir;
  dir.Write("checkpoints/last.ckpt", "not a checkpoint at all");
  RunResult r = Train(dir.path(), kThreeEpochs, 2, "last");
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(std::string(r.status.message()).find("last.ckpt: not a readable kiln checkpoint"),
            std::string::npos)
      << r.status;
  // A checkpoint of another model: same format, other parameter shapes.
  testing::TempDir other;
  Classifier task;
  ASSERT_TRUE(task.Build(config::Config()).ok());
  auto status = WriteCheckpoint(other.path() + "/x.ckpt", [](torch::serialize::OutputArchive& ar) {
    ar.write("meta/format", c10::IValue(kCheckpointFormat));
    ar.write("model/names", c10::IValue(std::string("layers.0.weight\n")));
    ar.write("model/0", torch::zeros({5, 5}));
  });
  ASSERT_TRUE(status.ok());
  auto loaded = Trainer::LoadWeights(other.path() + "/x.ckpt", task, "mlp");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.message()).find("checkpoint of another model"), std::string::npos)
      << loaded;
}

TEST(DataLoader, AnExceptionInALoaderThreadBecomesAnErrorNamingTheSample) {
  struct Throwing : data::Dataset {
    int64_t size() const override { return 64; }
    absl::StatusOr<data::Example> Get(int64_t i, data::SampleRng&) const override {
      if (i == 37) throw std::runtime_error("shape mismatch\nfirst frame");
      return data::Example{torch::zeros({2}), torch::tensor(0)};
    }
  };
  for (int workers : {0, 2}) {
    data::LoaderOptions o;
    o.batch_size = 8;
    o.num_workers = workers;
    data::DataLoader loader(std::make_shared<Throwing>(), data::SequentialSampler(64), o);
    int64_t delivered = 0;
    auto st = loader.Run(0, 0, loader.num_batches(), [&](data::Batch&) -> absl::StatusOr<bool> {
      ++delivered;
      return true;
    });
    EXPECT_EQ(std::string(st.message()), "cannot load sample 37: shape mismatch") << workers;
    EXPECT_EQ(delivered, 4) << workers;  // the batches before the failing one
  }
}

TEST(DataLoader, AnExceptionFromTheConsumerStopsTheLoaderCleanly) {
  testing::TempDir dir;
  SyntheticImages data(2);
  ASSERT_TRUE(data.Setup(data::Stage::kFit).ok());
  data::DataLoader loader(data.train_dataset(), data::SequentialSampler(96), data.loader_options());
  EXPECT_THROW(
      (void)loader.Run(0, 0, 6,
                       [](data::Batch&) -> absl::StatusOr<bool> { throw std::runtime_error("x"); }),
      std::runtime_error);
}

TEST(TrainerOptions, UnknownKeyAndBadValuesAreNamed) {
  auto bad = TrainerOptions::FromConfig(Yaml("max_epoch: 3\n", "trainer"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("unknown option 'trainer.max_epoch'"),
            std::string::npos);
  EXPECT_NE(std::string(bad.status().message()).find("did you mean 'max_epochs'"),
            std::string::npos);
  auto clip = TrainerOptions::FromConfig(Yaml("gradient_clip_algorithm: l3\n", "trainer"));
  ASSERT_FALSE(clip.ok());
  EXPECT_NE(std::string(clip.status().message()).find("trainer.gradient_clip_algorithm"),
            std::string::npos);
  auto profiler = TrainerOptions::FromConfig(Yaml("profiler: fancy\n", "trainer"));
  ASSERT_FALSE(profiler.ok());
  EXPECT_NE(std::string(profiler.status().message())
                .find("option 'trainer.profiler' of the trainer must be null, simple or advanced, "
                      "got fancy"),
            std::string::npos)
      << profiler.status();
  auto precision = TrainerOptions::FromConfig(Yaml("precision: bf17\n", "trainer"));
  ASSERT_FALSE(precision.ok());
  EXPECT_NE(std::string(precision.status().message()).find("trainer.precision"), std::string::npos);
  auto limit = TrainerOptions::FromConfig(
      Yaml("limit_train_batches: 10\nmax_time: 00:00:01:30\n", "trainer"));
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->limit_train_batches.Of(100), 10);
  EXPECT_DOUBLE_EQ(*limit->max_time, 90.0);
}

// A training metric logs each step's own value, and at the end of the epoch its value over the
// epoch's accumulated state (Task::TrainingEpochEnd), not the mean of the steps' values.
TEST(TrainingEpochLoop, TrainingMetricsComputeOverTheWholeEpoch) {
  testing::TempDir dir;
  auto logger = std::make_shared<RecordingLogger>();
  auto r =
      Train(dir.path(), kThreeEpochs, 0, "", {}, false, {logger}, kMlp, /*count_batches=*/true);
  ASSERT_TRUE(r.status.ok()) << r.status;
  auto steps = logger->Values("train/batches");
  ASSERT_EQ(steps.size(), 18u);  // 6 steps an epoch, each logged
  for (const auto& [step, value] : steps) EXPECT_EQ(value, 1.0) << "step " << step;
  // Every epoch counts its own 6 batches: the state starts afresh each epoch.
  EXPECT_EQ(logger->Values("train/batches_epoch"),
            (std::vector<std::pair<int64_t, double>>{{6, 6.0}, {12, 6.0}, {18, 6.0}}));
}

// validate, test and predict run where trainer.accelerator says, as fit does: on a machine
// without CUDA, accelerator=cuda is refused with the same line.
TEST(Trainer, EvaluateAndPredictSelectTheDeviceAsFitDoes) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has CUDA";
  auto options = TrainerOptions::FromConfig(Yaml("accelerator: cuda\nnum_threads: 1\n", "trainer"));
  ASSERT_TRUE(options.ok()) << options.status();
  Classifier task;
  ASSERT_TRUE(task.Build(config::Config()).ok());
  SyntheticImages data(0);
  Trainer trainer(*options, {}, {});
  const std::string refused =
      "trainer.accelerator=cuda, but " + NoCudaDeviceAvailable();  // and why (cuda_module.h)
  EXPECT_TRUE(
      absl::StartsWith(refused, "trainer.accelerator=cuda, but no CUDA device is available"));
  auto evaluated = trainer.Evaluate(task, data, data::Stage::kValidate);
  EXPECT_EQ(evaluated.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(evaluated.status().message(), refused);
  auto predicted = trainer.Predict(task, data);
  EXPECT_EQ(predicted.status().message(), refused);
  // accelerator=auto falls back to the CPU.
  auto automatic =
      TrainerOptions::FromConfig(Yaml("accelerator: auto\nnum_threads: 1\n", "trainer"));
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  Trainer cpu(*automatic, {}, {});
  auto metrics = cpu.Evaluate(task, data, data::Stage::kValidate);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->count("val/acc"), 1u);
}

// Collectives run where the backend takes tensors: Gloo on the CPU whatever the model's device,
// NCCL on the model's device.
TEST(Strategy, CollectivesRunOnTheCpuForGlooAndOnTheDeviceForNccl) {
  torch::Device cuda(torch::kCUDA, 0);
  EXPECT_EQ(Strategy::CollectiveDevice("gloo", cuda), torch::Device(torch::kCPU));
  EXPECT_EQ(Strategy::CollectiveDevice("gloo", torch::Device(torch::kCPU)),
            torch::Device(torch::kCPU));
  EXPECT_EQ(Strategy::CollectiveDevice("nccl", cuda), cuda);
}

TEST(Timer, StopsAtTheEndOfTheEpochPastTheDurationAndLogsElapsedTime) {
  testing::TempDir dir;
  auto logger = std::make_shared<RecordingLogger>();
  auto r = Train(dir.path(), kThreeEpochs, 0, "",
                 {BuildCallback("_target_: timer\nduration: {seconds: 0.001}\ninterval: epoch\n")},
                 false, {logger});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.steps, 6);  // one epoch of three
  auto elapsed = logger->Values("time/elapsed_seconds");
  ASSERT_EQ(elapsed.size(), 1u);
  EXPECT_GT(elapsed[0].second, 0.0);
  // A long duration lets all three epochs run.
  r = Train(dir.path() + "/long", kThreeEpochs, 0, "",
            {BuildCallback("_target_: timer\nduration: \"00:01:00:00\"\n")});
  EXPECT_EQ(r.steps, 18);
  // interval: step (the default) stops after the first step past the limit, mid-epoch, with a
  // resumable checkpoint.
  r = Train(dir.path() + "/step", kThreeEpochs, 0, "",
            {BuildCallback("_target_: timer\nduration: {seconds: 0.000001}\n")});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.steps, 1);
  EXPECT_TRUE(testing::FileExists(dir.path() + "/step/checkpoints/last.ckpt"));
  for (const char* bad :
       {"interval: batch\nduration: {hours: 1}", "duration: \"01:00\"", "duration: {hours: -1}",
        "duration: {weeks: 1}", "duration: \"00:00:00:00\""}) {
    auto timer = Registry<Callback>::Get().Instantiate(
        Yaml(std::string("_target_: timer\n") + bad + "\n", "callbacks.timer"));
    ASSERT_FALSE(timer.ok()) << bad;
    EXPECT_NE(std::string(timer.status().message()).find("'callbacks.timer."), std::string::npos)
        << timer.status();
  }
}

// trainer.min_epochs holds off every stop request until that many epochs are done, as Lightning's
// (its should_stop stays set, and the fit stops at the first epoch end past min_epochs): a Timer
// past its duration from the first step on stops after epoch 1 whether it checks at each epoch end
// or at each step. Six steps an epoch; without min_epochs the step timer stops after one step.
TEST(Trainer, MinEpochsHoldsOffStopRequests) {
  testing::TempDir dir;
  auto r =
      Train(dir.path() + "/epoch", std::string(kThreeEpochs) + "min_epochs: 2\n", 0, "",
            {BuildCallback("_target_: timer\nduration: {seconds: 0.000001}\ninterval: epoch\n")});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.steps, 12);
  r = Train(dir.path() + "/step", std::string(kThreeEpochs) + "min_epochs: 2\n", 0, "",
            {BuildCallback("_target_: timer\nduration: {seconds: 0.000001}\n")});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.steps, 12);
}

}  // namespace trainer_test
}  // namespace kiln
