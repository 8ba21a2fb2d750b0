// What the trainer tests share (trainer_test.cc, resume_test.cc, profiler_test.cc,
// callbacks_test.cc, lr_finder_test.cc): 96 synthetic 8x8 images, a classification task on
// them with a poisonable loss, Train() that fits it with the options given and returns the
// parameters, and loggers and callbacks that record what happened.
#pragma once

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

namespace kiln::fit_fixture {

inline config::Config Yaml(const std::string& text, const std::string& prefix) {
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
  bool splits_training_step() const override { return !whole_step_; }
  absl::StatusOr<TrainingOutputs> TrainingLoss(const data::Batch& b) override { return Forward(b); }
  absl::Status LogTrainingStep(const data::Batch& b, const TrainingOutputs& outputs,
                               MetricLog& log) override {
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

inline RunResult Train(const std::string& root, const std::string& trainer_yaml, int workers,
                       const std::string& ckpt_path,
                       std::vector<std::shared_ptr<Callback>> callbacks = {}, bool poison = false,
                       std::vector<std::shared_ptr<MetricsLogger>> loggers = {},
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

inline void ExpectBitwiseEqual(const std::vector<torch::Tensor>& a,
                               const std::vector<torch::Tensor>& b) {
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

inline std::shared_ptr<Callback> BuildCallback(const std::string& yaml) {
  auto callback = Registry<Callback>::Get().Instantiate(Yaml(yaml, "callbacks.x"));
  EXPECT_TRUE(callback.ok()) << callback.status();
  return callback.ok() ? *callback : nullptr;
}

}  // namespace kiln::fit_fixture
