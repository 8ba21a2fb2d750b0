// The trainer's contracts: an interrupted run (max_steps, or SIGTERM mid-epoch) resumed with
// ckpt_path=last ends with parameters bitwise equal to an uninterrupted run, also with another
// loader thread count; a NaN loss stops without a checkpoint; bad checkpoints are refused.
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
#include "lib/config/yaml_io.h"
#include "lib/core/exit_code.h"
#include "lib/data/datamodule.h"
#include "lib/data/shards/tar_shard.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"
#include "lib/trainer/checkpoint.h"
#include "lib/trainer/internal/cuda_graph_step.h"
#include "lib/trainer/lr_finder.h"
#include "lib/trainer/metric_collection.h"
#include "tests/support/process.h"

namespace kiln {
namespace trainer_test {

config::Config Yaml(const std::string& text, const std::string& prefix) {
  auto node = config::ParseYaml(text, prefix + ".yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  return config::Config(*node, prefix);
}

// 96 random 8x8 images in 3 classes, augmented with a random crop and flip.
class SyntheticImages : public data::DataModule {
 public:
  explicit SyntheticImages(int workers) : workers_(workers) {}
  absl::Status Setup(data::Stage) override {
    torch::manual_seed(7);
    images_ = torch::rand({96, 1, 8, 8});
    labels_ = torch::randint(0, 3, {96}, torch::kInt64);
    auto crop = Registry<data::Transform>::Get().Instantiate(
        Yaml("_target_: random_crop\nsize: 8\npadding: 1\n", "t"));
    auto flip =
        Registry<data::Transform>::Get().Instantiate(Yaml("_target_: horizontal_flip\n", "t"));
    if (!crop.ok() || !flip.ok()) return absl::InternalError("transforms");
    pipeline_ = data::TransformPipeline({*crop, *flip});
    auto self = this;
    struct Ds : data::Dataset {
      SyntheticImages* owner;
      int64_t size() const override { return owner->images_.size(0); }
      absl::StatusOr<data::Example> Get(int64_t i, data::SampleRng& rng) const override {
        return data::Example{owner->pipeline_.Apply(owner->images_[i], rng), owner->labels_[i]};
      }
    };
    auto ds = std::make_shared<Ds>();
    ds->owner = self;
    train_ = ds;
    return absl::OkStatus();
  }
  std::shared_ptr<const data::Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const data::Dataset> val_dataset() const override { return train_; }
  data::LoaderOptions loader_options() const override {
    data::LoaderOptions o;
    o.batch_size = 16;
    o.num_workers = workers_;
    return o;
  }

  torch::Tensor images_, labels_;
  data::TransformPipeline pipeline_;

 private:
  int workers_;
  std::shared_ptr<const data::Dataset> train_;
};

constexpr char kMlp[] =
    "_target_: mlp\nin_features: 64\nhidden: [32]\nnum_classes: 3\ndropout: 0.3\n";

// A training metric whose value over an epoch (the batches counted) differs from the mean of its
// per-batch values (always 1): it tells an epoch value over the accumulated state from a mean.
class BatchCount : public Metric {
 public:
  explicit BatchCount(const MetricOptions& o) : Metric(o) { AddState("batches", &batches_); }
  absl::Status Update(const MetricBatch&) override {
    batches_ += 1;
    return absl::OkStatus();
  }
  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>&) const override {
    return MetricValues{{"", batches_.item<double>()}};
  }

 private:
  torch::Tensor batches_ = torch::zeros({}, torch::kFloat64);
};
KILN_REGISTER_BOUND(Metric, "batch_count_test", "Batches seen (trainer test)",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<BatchCount>(o);
                    });

class Classifier : public Task {
 public:
  // `whole_step`: only TrainingStep, whose loss the trainer reads before the backward (as a task
  // that reads values on the host in its step); else also its two halves, TrainingLoss and
  // LogTrainingStep, as kiln's own tasks have them (the loss read once, after the backward).
  explicit Classifier(bool poison = false, std::string model_yaml = kMlp,
                      bool count_batches = false, int64_t poison_batch = 2, bool whole_step = false)
      : poison_(poison),
        model_yaml_(std::move(model_yaml)),
        count_batches_(count_batches),
        poison_batch_(poison_batch),
        whole_step_(whole_step) {}
  absl::Status Build(const config::Config&) override {
    auto m = Registry<Model>::Get().Instantiate(Yaml(model_yaml_, "model"));
    if (!m.ok()) return m.status();
    model_ = *m;
    if (!count_batches_) return absl::OkStatus();
    auto metrics = config::ParseYaml("batches: {_target_: batch_count_test, stages: [train]}\n",
                                     "task.metrics");
    if (!metrics.ok()) return metrics.status();
    return metrics_.Build(*metrics, "task.metrics", MetricSetup{3});
  }
  torch::nn::Module& module() override { return *model_; }
  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& b, MetricLog& log) override {
    TrainingOutputs outputs = Forward(b);
    auto st = Log(b, outputs, log);
    if (!st.ok()) return st;
    return outputs.loss;
  }
  absl::StatusOr<TrainingOutputs> TrainingLoss(const data::Batch& b) override {
    if (whole_step_) return Task::TrainingLoss(b);
    return Forward(b);
  }
  absl::Status LogTrainingStep(const data::Batch& b, const TrainingOutputs& outputs,
                               MetricLog& log) override {
    if (whole_step_) return Task::LogTrainingStep(b, outputs, log);
    return Log(b, outputs, log);
  }
  absl::StatusOr<std::map<std::string, double>> TrainingEpochEnd(const SumOverRanks& sum) override {
    return metrics_.Compute("train", sum);
  }
  absl::Status EvaluationStep(const data::Batch& b, const std::string& stage,
                              MetricLog& log) override {
    auto logits = model_->forward(b.input);
    log.Log(stage + "/acc", logits.argmax(1).eq(b.target).to(torch::kFloat).mean().item<double>(),
            static_cast<double>(b.size()));
    return absl::OkStatus();
  }
  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& b) override {
    return model_->forward(b.input);
  }

 private:
  TrainingOutputs Forward(const data::Batch& b) {
    torch::Tensor logits = model_->forward(b.input);
    auto loss = torch::nn::functional::cross_entropy(logits, b.target);
    if (poison_ && b.index == poison_batch_) loss = loss * std::nan("");
    return {loss, logits.detach()};
  }
  absl::Status Log(const data::Batch& b, const TrainingOutputs& outputs, MetricLog& log) {
    log.Log("train/loss", outputs.loss.item<double>(), static_cast<double>(b.size()));
    MetricBatch scores;
    scores.preds = outputs.preds;
    scores.target = b.target;
    return metrics_.Update("train", scores, log);
  }

  bool poison_;
  std::string model_yaml_;
  bool count_batches_;
  int64_t poison_batch_;
  bool whole_step_;
  MetricCollection metrics_;
  std::shared_ptr<Model> model_;
};

// Sends SIGTERM to this process after a given batch, as `kill -TERM` would.
class SigtermAfter : public Callback {
 public:
  explicit SigtermAfter(int64_t step, int signal = SIGTERM) : step_(step), signal_(signal) {}
  absl::Status OnTrainBatchEnd(Trainer& t, const data::Batch&, double) override {
    if (t.global_step() == step_ && !sent_) {
      sent_ = true;
      std::raise(signal_);
    }
    return absl::OkStatus();
  }

 private:
  int64_t step_;
  int signal_;
  bool sent_ = false;
};

struct RunResult {
  absl::Status status;
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;  // of params
  int64_t steps = 0;
  std::vector<double> group_lrs;  // the optimizer's parameter groups at the end
  PhaseProfiler profile;
};

RunResult Train(const std::string& root, const std::string& trainer_yaml, int workers,
                const std::string& ckpt_path, std::vector<std::shared_ptr<Callback>> callbacks = {},
                bool poison = false, std::vector<std::shared_ptr<MetricsLogger>> loggers = {},
                const std::string& model_yaml = kMlp, bool count_batches = false,
                const std::string& optimizer_yaml = "_target_: adamw\nlr: 0.01\n",
                data::DataModule* data_module = nullptr, bool whole_step = false) {
  RunResult result;
  auto options = TrainerOptions::FromConfig(
      Yaml(trainer_yaml + "default_root_dir: " + root +
               "\nnum_threads: 1\nenable_progress_bar: false\nnum_sanity_val_steps: 0\n",
           "trainer"));
  EXPECT_TRUE(options.ok()) << options.status();
  torch::manual_seed(1);
  Classifier task(poison, model_yaml, count_batches, /*poison_batch=*/2, whole_step);
  EXPECT_TRUE(task.Build(config::Config()).ok());
  SyntheticImages synthetic(workers);
  data::DataModule& data = data_module != nullptr ? *data_module : synthetic;
  auto optimizer = Registry<OptimizerFactory>::Get().Instantiate(Yaml(optimizer_yaml, "optimizer"));
  auto scheduler = Registry<Scheduler>::Get().Instantiate(
      Yaml("_target_: cosine_with_warmup\nwarmup_steps: 3\ntotal_steps: 18\n", "scheduler"));
  EXPECT_TRUE(optimizer.ok() && scheduler.ok()) << optimizer.status();
  Trainer trainer(*options, std::move(callbacks), std::move(loggers));
  FitInputs in;
  in.task = &task;
  in.data = &data;
  in.optimizer = *optimizer;
  in.scheduler = *scheduler;
  in.ckpt_path = ckpt_path;
  in.seed = 99;
  in.model_name = "mlp";
  result.status = trainer.Fit(in);
  for (const auto& p : task.module().named_parameters()) {
    result.params.push_back(p.value().detach().clone());
    result.names.push_back(p.key());
  }
  result.steps = trainer.global_step();
  result.profile = trainer.profiler();
  if (trainer.optimizer() != nullptr) {
    for (const auto& group : trainer.optimizer()->param_groups())
      result.group_lrs.push_back(group.options().get_lr());
  }
  return result;
}

void ExpectBitwiseEqual(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i << " differs";
}

const char kThreeEpochs[] = "max_epochs: 3\nlog_every_n_steps: 1\n";
// A CNN for SyntheticImages' 8x8 images: convolutions, BatchNorm, max-pool, linear layers.
const char kSmallCnn[] =
    "_target_: cnn\nin_channels: 1\nchannels: [4, 8]\ninput_size: 8\nhidden: 16\nnum_classes: 3\n";
// The same with channel counts that bf16's fused BatchNorm -> max-pool -> ReLU kernel takes
// (multiples of 8, with trainer.channels_last).
const char kSmallCnn8[] =
    "_target_: cnn\nin_channels: 1\nchannels: [8, 16]\ninput_size: 8\nhidden: 16\nnum_classes: 3\n";

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

// trainer.profiler=simple counts every training batch's forward, backward and optimizer step
// and the waits for data, and splits the fit's time between them; the phases never add up to
// more than the fit took (each counts its own time only).
TEST(Profiler, SimpleTimesEveryPhaseOfEveryBatch) {
  testing::TempDir dir;
  RunResult run = Train(dir.path(), std::string(kThreeEpochs) + "profiler: simple\n", 0, "");
  ASSERT_TRUE(run.status.ok()) << run.status;
  const PhaseProfiler& p = run.profile;
  ASSERT_TRUE(p.enabled());
  for (auto phase : {PhaseProfiler::kData, PhaseProfiler::kForward, PhaseProfiler::kBackward,
                     PhaseProfiler::kOptimizer}) {
    EXPECT_EQ(p.calls(phase), 18) << PhaseProfiler::Name(phase);
    EXPECT_GT(p.seconds(phase), 0) << PhaseProfiler::Name(phase);
  }
  EXPECT_EQ(p.calls(PhaseProfiler::kValidation), 3);  // once per epoch
  EXPECT_GT(p.calls(PhaseProfiler::kLogging), 18);    // every step (log_every_n_steps: 1) and epoch
  double sum = 0;
  for (int phase = 0; phase < PhaseProfiler::kPhases; ++phase)
    sum += p.seconds(static_cast<PhaseProfiler::Phase>(phase));
  std::vector<std::string> table = p.Report(sum * 1.25);
  ASSERT_EQ(table.size(), 2 + 7 + 1u);  // header, 7 phases, other, fit
  EXPECT_NE(table[2].find("forward"), std::string::npos) << table[2];
  EXPECT_NE(table[8].find("other"), std::string::npos) << table[8];
  EXPECT_NE(table[8].find("20.0%"), std::string::npos) << table[8];
  // Off by default: nothing measured.
  testing::TempDir plain;
  RunResult off = Train(plain.path(), kThreeEpochs, 0, "");
  EXPECT_FALSE(off.profile.enabled());
  EXPECT_EQ(off.profile.calls(PhaseProfiler::kForward), 0);
}

// trainer.profiler=advanced writes LibTorch's operator profile of training batches 3-22 (the
// default window) as a Chrome trace: a JSON array of events with names, phases and timestamps,
// among them the model's
// linear layers, their backward and the optimizer's update.
TEST(Profiler, AdvancedWritesAChromeTraceOfOperators) {
  testing::TempDir dir;
  RunResult run = Train(dir.path(), std::string(kThreeEpochs) + "profiler: advanced\n", 0, "");
  ASSERT_TRUE(run.status.ok()) << run.status;
  const std::string path = dir.path() + "/profile.trace.json";
  ASSERT_TRUE(testing::FileExists(path));
  // JSON is YAML's flow style: yaml-cpp parses it (and fails on what JSON would refuse too:
  // unbalanced brackets, a missing comma between events).
  auto trace = config::ParseYaml(testing::ReadFile(path), path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_TRUE((*trace)->is_list());
  ASSERT_GT((*trace)->size(), 100u);
  std::set<std::string> names;
  for (const config::NodePtr& event : (*trace)->items()) {
    ASSERT_TRUE(event->is_map());
    ASSERT_NE(event->Find("name"), nullptr);
    ASSERT_NE(event->Find("ts"), nullptr);
    ASSERT_NE(event->Find("ph"), nullptr);
    names.insert(event->Find("name")->as_string());
    // Numbered as the Trace Event Format has it (LibTorch writes "CPU Functions"), and named.
    ASSERT_NE(event->Find("pid"), nullptr);
    EXPECT_EQ(event->Find("pid")->kind(), config::NodeKind::kInt);
    EXPECT_EQ(event->Find("pid")->as_int(), 1);
  }
  EXPECT_EQ(names.count("process_name"), 1u);
  EXPECT_EQ(names.count("thread_name"), 1u);
  EXPECT_EQ(names.count("aten::addmm"), 1u);  // the forward pass
  EXPECT_EQ(names.count("autograd::engine::evaluate_function: AddmmBackward0"),
            1u);                                      // the backward
  EXPECT_EQ(names.count("aten::_fused_adamw_"), 1u);  // AdamW's step (ATen's fused kernel)
}

// The advanced profiler's window (trainer.profiler_wait/_warmup/_active): 3 recorded batches hold
// exactly 3 AdamW updates (one _fused_adamw_ per step over the one parameter group), 1 batch
// exactly 1; a window past the end of training writes no trace.
TEST(Profiler, AdvancedRecordsTheConfiguredWindowOfBatches) {
  auto updates = [](const std::string& window) -> int64_t {
    testing::TempDir dir;
    RunResult run =
        Train(dir.path(), std::string(kThreeEpochs) + "profiler: advanced\n" + window, 0, "");
    EXPECT_TRUE(run.status.ok()) << run.status;
    const std::string path = dir.path() + "/profile.trace.json";
    if (!testing::FileExists(path)) return -1;
    auto trace = config::ParseYaml(testing::ReadFile(path), path);
    EXPECT_TRUE(trace.ok()) << trace.status();
    if (!trace.ok()) return -2;
    int64_t n = 0;
    for (const config::NodePtr& event : (*trace)->items())
      n += event->Find("name")->as_string() == "aten::_fused_adamw_";
    return n;
  };
  EXPECT_EQ(updates("profiler_wait: 2\nprofiler_warmup: 1\nprofiler_active: 3\n"), 3);
  EXPECT_EQ(updates("profiler_wait: 0\nprofiler_warmup: 0\nprofiler_active: 1\n"), 1);
  EXPECT_EQ(updates("profiler_wait: 10\nprofiler_warmup: 10\nprofiler_active: 1\n"),
            -1);  // 18 batches in all
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

TEST(TrainerResume, LastWithNoCheckpointStartsFresh) {
  testing::TempDir a, b;
  RunResult fresh = Train(a.path(), kThreeEpochs, 2, "");
  RunResult last = Train(b.path(), kThreeEpochs, 2, "last");
  ASSERT_TRUE(last.status.ok()) << last.status;
  ExpectBitwiseEqual(fresh.params, last.params);
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

// Keeps every logged row.
class RecordingLogger : public MetricsLogger {
 public:
  absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) override {
    rows.push_back({step, metrics});
    return absl::OkStatus();
  }
  // (step, value) of every row holding `key`.
  std::vector<std::pair<int64_t, double>> Values(const std::string& key) const {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& [step, metrics] : rows) {
      if (auto it = metrics.find(key); it != metrics.end()) out.push_back({step, it->second});
    }
    return out;
  }
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
};

std::shared_ptr<Callback> BuildCallback(const std::string& yaml) {
  auto callback = Registry<Callback>::Get().Instantiate(Yaml(yaml, "callbacks.x"));
  EXPECT_TRUE(callback.ok()) << callback.status();
  return callback.ok() ? *callback : nullptr;
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
  const std::string refused = "trainer.accelerator=cuda, but no CUDA device is available";
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

}  // namespace trainer_test
}  // namespace kiln
