// ClassificationTask as a task author meets it: a new classification task written as
// docs/architecture.md says (SignTask below, its whole code), registered, built from a config,
// stepped on a batch whose logits are known; its options are checked by the shared declaration.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/match.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "tasks/classification_task.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

// ---- A new classification task: inputs [B, F]; also logs how often class 1 is predicted. ----
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
  absl::Status LogMoreMetrics(const torch::Tensor& logits, const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    double ones = logits.argmax(1).eq(1).to(torch::kFloat64).mean().item<double>();
    log.Log(stage + "/predicted_one", ones, static_cast<double>(batch.size()));
    return absl::OkStatus();
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

config::Config Yaml(const std::string& text) {
  auto node = config::ParseYaml(text, "job.yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  return config::Config(*node);
}

absl::StatusOr<std::shared_ptr<Task>> BuildTask(const std::string& task_yaml) {
  config::Config job = Yaml("task:\n" + task_yaml + "model:\n  _target_: mlp\n  in_features: 4\n  hidden: []\n"
                            "  num_classes: 2\n");
  auto task_cfg = job.Sub("task");
  if (!task_cfg.ok()) return task_cfg.status();
  auto task = Registry<Task>::Get().Instantiate(*task_cfg);
  if (!task.ok()) return task.status();
  if (auto st = (*task)->Build(job); !st.ok()) return st;
  return task;
}

TEST(ClassificationTask, ANewTaskGetsLossAccuracyItsMetricAndTheTestReport) {
  auto task = BuildTask("  _target_: sign_test\n  num_classes: 2\n");
  ASSERT_TRUE(task.ok()) << task.status();
  // The model's one linear layer: logit 0 = -sum(x), logit 1 = +sum(x), no bias.
  auto params = (*task)->module().parameters();
  ASSERT_EQ(params.size(), 2u);
  torch::NoGradGuard no_grad;
  params[0].copy_(torch::tensor({{-1.f, -1.f, -1.f, -1.f}, {1.f, 1.f, 1.f, 1.f}}));
  params[1].zero_();
  data::Batch batch;
  batch.input = torch::tensor({{1.f, 0.f, 0.f, 0.f}, {-1.f, 0.f, 0.f, 0.f}, {2.f, 0.f, 0.f, 0.f}, {-3.f, 0.f, 0.f, 0.f}});
  batch.target = torch::tensor({1, 0, 0, 0}, torch::kInt64);  // the third row is predicted wrong
  MetricLog log;
  ASSERT_TRUE((*task)->EvaluationStep(batch, "test", log).ok());
  auto means = log.EpochMeans();
  EXPECT_DOUBLE_EQ(means.at("test/acc"), 0.75);
  EXPECT_DOUBLE_EQ(means.at("test/predicted_one"), 0.5);
  torch::Tensor logits = torch::tensor({{-1.f, 1.f}, {1.f, -1.f}, {-2.f, 2.f}, {3.f, -3.f}});
  double loss = torch::nn::functional::cross_entropy(logits, batch.target).item<double>();
  EXPECT_NEAR(means.at("test/loss"), loss, 1e-6);
  EXPECT_EQ(means.count("test/acc_top0"), 0u);  // top_k defaults to 0 for a task that declares none

  testing::TempDir dir;
  auto report = (*task)->TestReport(dir.path(), {"negative", "positive"});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_DOUBLE_EQ(report->at("test/acc_class/negative"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(report->at("test/acc_class/positive"), 1.0);
  EXPECT_EQ(testing::ReadFile(dir.path() + "/test_confusion_matrix.csv"),
            "true/predicted,negative,positive\nnegative,2,1\npositive,0,1\n");

  auto probabilities = (*task)->PredictStep(batch);
  ASSERT_TRUE(probabilities.ok());
  EXPECT_TRUE(torch::allclose(*probabilities, torch::softmax(logits, 1)));
  batch.input = torch::zeros({2, 3});
  EXPECT_EQ((*task)->PredictStep(batch).status().message(), "sign_test expects inputs [batch, task.features]");
}

TEST(ClassificationTask, SharedOptionsAreCheckedOnceForEveryTask) {
  for (const char* target : {"sign_test", "image_classification", "text_classification", "keyword_spotting"}) {
    auto one = BuildTask(std::string("  _target_: ") + target + "\n  num_classes: 1\n");
    ASSERT_FALSE(one.ok()) << target;
    EXPECT_TRUE(absl::StrContains(one.status().message(), "option 'task.num_classes' of task '" +
                                                              std::string(target) + "' must be at least 2, got 1"))
        << one.status();
    auto smoothing = BuildTask(std::string("  _target_: ") + target + "\n  num_classes: 2\n  label_smoothing: 1\n");
    ASSERT_FALSE(smoothing.ok()) << target;
    EXPECT_TRUE(absl::StrContains(smoothing.status().message(), "must be in [0, 1), got 1 (set at job.yaml:"))
        << smoothing.status();
    auto missing = BuildTask(std::string("  _target_: ") + target + "\n");
    ASSERT_FALSE(missing.ok()) << target;
    EXPECT_TRUE(absl::StrContains(missing.status().message(), "option 'task.num_classes' of task '" +
                                                                  std::string(target) + "' is required"))
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
