// ClassificationTask as a task author meets it: a new classification task written as
// docs/architecture.md says (SignTask below, its whole code) and a new metric (PredictedOne),
// registered, built from a config that lists the metrics, stepped on a batch whose logits are
// known; its options are checked by the shared declaration.
#include "tasks/classification_task.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/match.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

// ---- A new classification task: inputs [B, F]. ----
struct SignOptions : ClassificationOptions {
  int64_t features = 4;
};

class SignTask : public ClassificationTask {
 public:
  explicit SignTask(const SignOptions& o) : ClassificationTask(o), features_(o.features) {}

 protected:
  absl::StatusOr<torch::Tensor> Forward(const data::Batch& batch) override {
    if (batch.input.dim() != 2 || batch.input.size(1) != features_) {
      return absl::InvalidArgumentError("sign_test expects inputs [batch, task.features]");
    }
    return model().forward(batch.input);
  }

 private:
  int64_t features_;
};

KILN_REGISTER_BOUND(Task, "sign_test", "Test task: the sign of a feature sum",
                    ClassificationOptionBinding<SignOptions>("number of classes")
                        .Field("features", &SignOptions::features, "input features", AtLeast(1)),
                    [](const SignOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
                      return std::make_shared<SignTask>(o);
                    });
// ---- end of the task ----

// ---- A new metric: how often class 1 is predicted. ----
class PredictedOne : public Metric {
 public:
  explicit PredictedOne(const MetricOptions& o) : Metric(o) {
    AddState("ones", &ones_);
    AddState("rows", &rows_);
  }
  absl::Status Update(const MetricBatch& batch) override {
    ones_ += batch.preds.argmax(1).eq(1).sum().item<int64_t>();
    rows_ += batch.preds.size(0);
    return absl::OkStatus();
  }
  absl::StatusOr<MetricValues> Compute(
      const std::vector<std::string>& /*class_names*/) const override {
    return Share(ones_, rows_);
  }

 private:
  torch::Tensor ones_ = torch::zeros({}, torch::kInt64), rows_ = torch::zeros({}, torch::kInt64);
};

KILN_REGISTER_BOUND(Metric, "predicted_one_test",
                    "Test metric: the share of rows predicted as class 1",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<PredictedOne>(o);
                    });
// ---- end of the metric ----

// A data module that only names the classes.
struct NamedClasses : data::DataModule {
  absl::Status Setup(data::Stage) override { return absl::OkStatus(); }
  std::vector<std::string> class_names() const override { return {"negative", "positive"}; }
  data::LoaderOptions loader_options() const override { return {}; }
};

config::Config Yaml(const std::string& text) {
  auto node = config::ParseYaml(text, "job.yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  return config::Config(*node);
}

absl::StatusOr<std::shared_ptr<Task>> BuildTask(const std::string& task_yaml) {
  config::Config job = Yaml("task:\n" + task_yaml +
                            "model:\n  _target_: mlp\n  in_features: 4\n  hidden: []\n"
                            "  num_classes: 2\n");
  auto task_cfg = job.Sub("task");
  if (!task_cfg.ok()) return task_cfg.status();
  auto task = Registry<Task>::Get().Instantiate(*task_cfg);
  if (!task.ok()) return task.status();
  if (auto st = (*task)->Build(job); !st.ok()) return st;
  return task;
}

constexpr const char* kMetrics =
    "  metrics:\n"
    "    acc: {_target_: accuracy, stages: [train, val, test]}\n"
    "    predicted_one: {_target_: predicted_one_test}\n"
    "    acc_class: {_target_: accuracy, average: none, stages: [test]}\n"
    "    confusion_matrix: {_target_: confusion_matrix, stages: [test]}\n";

TEST(ClassificationTask, ANewTaskGetsLossTheListedMetricsAndTheTestReport) {
  auto task = BuildTask(std::string("  _target_: sign_test\n  num_classes: 2\n") + kMetrics);
  ASSERT_TRUE(task.ok()) << task.status();
  NamedClasses data;
  ASSERT_TRUE((*task)->Connect(data).ok());
  // The model's one linear layer: logit 0 = -sum(x), logit 1 = +sum(x), no bias.
  auto params = (*task)->module().parameters();
  ASSERT_EQ(params.size(), 2u);
  torch::NoGradGuard no_grad;
  params[0].copy_(torch::tensor({{-1.f, -1.f, -1.f, -1.f}, {1.f, 1.f, 1.f, 1.f}}));
  params[1].zero_();
  data::Batch batch;
  batch.input = torch::tensor(
      {{1.f, 0.f, 0.f, 0.f}, {-1.f, 0.f, 0.f, 0.f}, {2.f, 0.f, 0.f, 0.f}, {-3.f, 0.f, 0.f, 0.f}});
  batch.target = torch::tensor({1, 0, 0, 0}, torch::kInt64);  // the third row is predicted wrong
  MetricLog log;
  ASSERT_TRUE((*task)->EvaluationStep(batch, "test", log).ok());
  auto means = log.EpochMeans();
  auto values = (*task)->EvaluationEnd("test", nullptr);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_DOUBLE_EQ(values->at("test/acc"), 0.75);
  EXPECT_DOUBLE_EQ(values->at("test/predicted_one"), 0.5);
  torch::Tensor logits = torch::tensor({{-1.f, 1.f}, {1.f, -1.f}, {-2.f, 2.f}, {3.f, -3.f}});
  double loss = torch::nn::functional::cross_entropy(logits, batch.target).item<double>();
  EXPECT_NEAR(means.at("test/loss"), loss, 1e-6);
  EXPECT_EQ(values->count("test/acc_top5"), 0u);  // only the metrics the config lists
  EXPECT_DOUBLE_EQ(values->at("test/acc_class/negative"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(values->at("test/acc_class/positive"), 1.0);

  testing::TempDir dir;
  auto report = (*task)->TestReport(dir.path(), {"negative", "positive"});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(testing::ReadFile(dir.path() + "/test_confusion_matrix.csv"),
            "true/predicted,negative,positive\nnegative,2,1\npositive,0,1\n");

  // Training logs the loss and the metrics listed for training, per batch.
  MetricLog train;
  ASSERT_TRUE((*task)->TrainingStep(batch, train).ok());
  EXPECT_EQ(train.last().size(), 2u);
  EXPECT_DOUBLE_EQ(train.last().at("train/acc"), 0.75);
  EXPECT_NEAR(train.last().at("train/loss"), loss, 1e-6);

  auto probabilities = (*task)->PredictStep(batch);
  ASSERT_TRUE(probabilities.ok());
  EXPECT_TRUE(torch::allclose(*probabilities, torch::softmax(logits, 1)));
  batch.input = torch::zeros({2, 3});
  EXPECT_EQ((*task)->PredictStep(batch).status().message(),
            "sign_test expects inputs [batch, task.features]");
}

// The loss is task.loss, a component; without one, cross-entropy with task.label_smoothing.
TEST(ClassificationTask, TheLossIsAComponentWithLabelSmoothingByDefault) {
  data::Batch batch;
  batch.input = torch::tensor({{1.f, 0.f, 0.f, 0.f}, {-1.f, 0.f, 0.f, 0.f}});
  batch.target = torch::tensor({1, 1}, torch::kInt64);
  for (const char* options :
       {"  label_smoothing: 0.2\n", "  loss: {_target_: cross_entropy, label_smoothing: 0.2}\n"}) {
    auto task = BuildTask(std::string("  _target_: sign_test\n  num_classes: 2\n") + options);
    ASSERT_TRUE(task.ok()) << task.status();
    MetricLog log;
    auto loss = (*task)->TrainingStep(batch, log);
    ASSERT_TRUE(loss.ok()) << loss.status();
    auto params = (*task)->module().parameters();  // the model's one linear layer
    torch::Tensor logits =
        torch::nn::functional::linear(batch.input, params[0], params[1]).detach();
    torch::Tensor expected = torch::nn::functional::cross_entropy(
        logits, batch.target,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(0.2));
    EXPECT_NEAR(loss->item<double>(), expected.item<double>(), 1e-6) << options;
  }
  auto unknown =
      BuildTask("  _target_: sign_test\n  num_classes: 2\n  loss: {_target_: cross_entropi}\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "unknown loss 'cross_entropi'"))
      << unknown.status();
  auto metric =
      BuildTask("  _target_: sign_test\n  num_classes: 2\n  metrics: {acc: {_target_: acc}}\n");
  ASSERT_FALSE(metric.ok());
  EXPECT_TRUE(absl::StrContains(metric.status().message(), "unknown metric 'acc'"))
      << metric.status();
}

TEST(ClassificationTask, SharedOptionsAreCheckedOnceForEveryTask) {
  for (const char* target :
       {"sign_test", "image_classification", "text_classification", "keyword_spotting"}) {
    auto one = BuildTask(std::string("  _target_: ") + target + "\n  num_classes: 1\n");
    ASSERT_FALSE(one.ok()) << target;
    EXPECT_TRUE(absl::StrContains(one.status().message(), "option 'task.num_classes' of task '" +
                                                              std::string(target) +
                                                              "' must be at least 2, got 1"))
        << one.status();
    auto smoothing = BuildTask(std::string("  _target_: ") + target +
                               "\n  num_classes: 2\n  label_smoothing: 1\n");
    ASSERT_FALSE(smoothing.ok()) << target;
    EXPECT_TRUE(absl::StrContains(smoothing.status().message(),
                                  "must be in [0, 1), got 1 (set at job.yaml:"))
        << smoothing.status();
    auto missing = BuildTask(std::string("  _target_: ") + target + "\n");
    ASSERT_FALSE(missing.ok()) << target;
    EXPECT_TRUE(absl::StrContains(
        missing.status().message(),
        "option 'task.num_classes' of task '" + std::string(target) + "' is required"))
        << missing.status();
  }
  // A wrong model is named with the model's output and the task's class count.
  auto task = BuildTask("  _target_: sign_test\n  num_classes: 3\n");
  ASSERT_TRUE(task.ok()) << task.status();
  data::Batch batch;
  batch.input = torch::zeros({2, 4});
  batch.target = torch::zeros({2}, torch::kInt64);
  MetricLog log;
  EXPECT_EQ((*task)->TrainingStep(batch, log).status().message(),
            "the model outputs [2, 2] for a batch of 2, but task.num_classes=3");
}

}  // namespace
}  // namespace kiln
