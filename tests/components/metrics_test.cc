// Metrics (components/metrics/) against hand-computed values; their shared behaviour (reset, the
// state's round trip, summing over ranks with a fake all-reduce that doubles the state, no value
// without data); the collection a task builds from `task.metrics` (stages, names, per-batch
// training values, a new epoch after Compute); the cross_entropy loss; edit distances.
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/match.h"
#include "components/metrics/edit_distance.h"
#include "lib/config/yaml_io.h"
#include "lib/trainer/loss.h"
#include "lib/trainer/metric_collection.h"
#include "tests/components/instantiate.h"
#include "tests/support/process.h"

namespace kiln {
namespace metrics_test {

std::shared_ptr<Metric> Make(const std::string& yaml, int64_t num_classes = 3) {
  auto metric = testing::InstantiateOk<Metric>(yaml, "task.metrics.m");
  if (metric == nullptr) return nullptr;
  absl::Status st = metric->Setup(MetricSetup{num_classes});
  EXPECT_TRUE(st.ok()) << st;
  return metric;
}

MetricBatch Scores(torch::Tensor preds, torch::Tensor target) {
  MetricBatch b;
  b.preds = std::move(preds);
  b.target = std::move(target);
  return b;
}

// Rows predicted 0, 1, 2, 2, 0 (the highest score) for true classes 0, 1, 1, 2, 2; second-best
// scores: 1, 2, 1, 0, 2.
MetricBatch FiveRows() {
  return Scores(
      torch::tensor(
          {{3.f, 2.f, 0.f}, {0.f, 3.f, 2.f}, {0.f, 2.f, 3.f}, {2.f, 0.f, 3.f}, {3.f, 0.f, 2.f}}),
      torch::tensor({0, 1, 1, 2, 2}, torch::kInt64));
}

MetricValues Values(const Metric& m, const std::vector<std::string>& names = {}) {
  auto values = m.Compute(names);
  EXPECT_TRUE(values.ok()) << values.status();
  return values.ok() ? *values : MetricValues();
}

absl::Status Double(torch::Tensor& t) {
  t.mul_(2);
  return absl::OkStatus();
}

// torchmetrics' forward: a batch's own value, while the state keeps every batch.
TEST(Metric, ForwardGivesTheBatchValueAndKeepsAccumulating) {
  auto acc = Registry<Metric>::Get().Instantiate("accuracy", Options());
  ASSERT_TRUE(acc.ok()) << acc.status();
  auto first = (*acc)->Forward(FiveRows(), {});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_DOUBLE_EQ(first->at(""), 0.6);
  auto second = (*acc)->Forward(
      Scores(torch::tensor({{1.f, 0.f, 0.f}}), torch::tensor({0}, torch::kInt64)), {});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_DOUBLE_EQ(second->at(""), 1.0);
  EXPECT_DOUBLE_EQ((*acc)->Compute({})->at(""), 4.0 / 6);
  // A batch it refuses leaves the state as it was.
  MetricBatch wrong =
      Scores(torch::tensor({{1.f, 0.f, 0.f}}), torch::tensor({0, 1}, torch::kInt64));
  EXPECT_FALSE((*acc)->Forward(wrong, {}).ok());
  EXPECT_EQ((*acc)->StateDict().at("total").item<int64_t>(), 6);
  EXPECT_DOUBLE_EQ((*acc)->Compute({})->at(""), 4.0 / 6);
}

TEST(Accuracy, CorrectOverTotalAcrossBatchesResetAndState) {
  auto acc = Make("_target_: accuracy\n");
  ASSERT_NE(acc, nullptr);
  EXPECT_TRUE(Values(*acc).empty());  // no rows, no value
  ASSERT_TRUE(acc->Update(FiveRows()).ok());
  EXPECT_DOUBLE_EQ(Values(*acc).at(""), 3.0 / 5.0);
  // A second batch of 3 rows, 1 right: 4 / 8 (not the mean of 3/5 and 1/3).
  ASSERT_TRUE(acc->Update(Scores(torch::tensor({{1.f, 0.f, 0.f}, {1.f, 0.f, 0.f}, {1.f, 0.f, 0.f}}),
                                 torch::tensor({0, 1, 2}, torch::kInt64)))
                  .ok());
  EXPECT_DOUBLE_EQ(Values(*acc).at(""), 0.5);
  auto state = acc->StateDict();
  EXPECT_EQ(state.at("correct").item<int64_t>(), 4);
  EXPECT_EQ(state.at("total").item<int64_t>(), 8);
  // Summed over two ranks with the same state: the counts double, the value stays.
  ASSERT_TRUE(acc->Sync(Double).ok());
  EXPECT_EQ(acc->StateDict().at("total").item<int64_t>(), 16);
  EXPECT_DOUBLE_EQ(Values(*acc).at(""), 0.5);
  acc->Reset();
  EXPECT_TRUE(Values(*acc).empty());
  // The saved state comes back into a fresh metric.
  auto restored = Make("_target_: accuracy\n");
  ASSERT_TRUE(restored->LoadStateDict(state).ok());
  EXPECT_DOUBLE_EQ(Values(*restored).at(""), 0.5);
  state.erase("total");
  EXPECT_EQ(restored->LoadStateDict(state).message(), "metric state 'total' is missing");
  state["total"] = torch::zeros({2}, torch::kInt64);
  EXPECT_EQ(restored->LoadStateDict(state).message(),
            "metric state 'total' has shape [2], expected []");
}

TEST(Accuracy, MaskedPositionsAndLeadingDimensions) {
  auto acc = Make("_target_: accuracy\n");
  // [B=1, T=3, V=2]: tokens 0 and 1 right, the third wrong but masked out.
  MetricBatch b = Scores(torch::tensor({{{2.f, 0.f}, {0.f, 2.f}, {2.f, 0.f}}}),
                         torch::tensor({{0, 1, 1}}, torch::kInt64));
  b.mask = torch::tensor({{true, true, false}});
  ASSERT_TRUE(acc->Update(b).ok());
  EXPECT_DOUBLE_EQ(Values(*acc).at(""), 1.0);
  EXPECT_EQ(acc->Update(Scores(torch::zeros({2, 3}), torch::zeros({3}, torch::kInt64))).message(),
            "accuracy needs scores [..., classes] and class ids [...], got [2, 3] and [3]");
}

TEST(Accuracy, PerClassAndMacro) {
  auto by_class = Make("_target_: accuracy\naverage: none\n");
  auto macro = Make("_target_: accuracy\naverage: macro\n");
  ASSERT_TRUE(by_class->Update(FiveRows()).ok());
  ASSERT_TRUE(macro->Update(FiveRows()).ok());
  // Class 0: 1 of 1; class 1: 1 of 2; class 2: 1 of 2.
  EXPECT_EQ(Values(*by_class, {"cat", "dog", "owl"}),
            (MetricValues{{"cat", 1.0}, {"dog", 0.5}, {"owl", 0.5}}));
  // Without one name per class, classes are named by index.
  EXPECT_EQ(Values(*by_class, {"cat"}), (MetricValues{{"0", 1.0}, {"1", 0.5}, {"2", 0.5}}));
  EXPECT_DOUBLE_EQ(Values(*macro).at(""), 2.0 / 3.0);
  // A class with no rows has no accuracy.
  by_class->Reset();
  ASSERT_TRUE(
      by_class->Update(Scores(torch::tensor({{1.f, 0.f, 0.f}}), torch::tensor({0}, torch::kInt64)))
          .ok());
  EXPECT_EQ(Values(*by_class), (MetricValues{{"0", 1.0}}));
  // Per class needs the task's classes.
  auto lm = testing::InstantiateOk<Metric>("_target_: accuracy\naverage: none\n", "task.metrics.m");
  EXPECT_EQ(lm->Setup(MetricSetup{}).message(),
            "accuracy counts per class: it needs a classification task (one with num_classes)");
  EXPECT_EQ(
      by_class->Update(Scores(torch::zeros({1, 3}), torch::tensor({3}, torch::kInt64))).message(),
      "accuracy: a class id outside [0, 3)");
}

TEST(TopKAccuracy, TrueClassAmongTheKHighest) {
  auto top2 = Make("_target_: top_k_accuracy\nk: 2\n");
  ASSERT_TRUE(top2->Update(FiveRows()).ok());
  // The two highest of each row: {0,1} {1,2} {2,1} {2,0} {0,2}; each holds the true class.
  EXPECT_DOUBLE_EQ(Values(*top2).at(""), 1.0);
  auto top1 = Make("_target_: top_k_accuracy\nk: 1\n");
  ASSERT_TRUE(top1->Update(FiveRows()).ok());
  EXPECT_DOUBLE_EQ(Values(*top1).at(""), 3.0 / 5.0);
  // k not below the number of classes: every row would count, nothing is logged.
  auto top3 = Make("_target_: top_k_accuracy\nk: 3\n");
  ASSERT_TRUE(top3->Update(FiveRows()).ok());
  EXPECT_TRUE(Values(*top3).empty());
  auto zero = testing::Instantiate<Metric>("_target_: top_k_accuracy\nk: 0\n", "task.metrics.top");
  EXPECT_TRUE(absl::StrContains(zero.status().message(),
                                "option 'task.metrics.top.k' of metric 'top_k_accuracy' "
                                "must be at least 1, got 0"))
      << zero.status();
}

TEST(F1, PerClassMacroAndMicro) {
  auto none = Make("_target_: f1\naverage: none\n");
  auto macro = Make("_target_: f1\n");
  auto micro = Make("_target_: f1\naverage: micro\n");
  for (auto* m : {&none, &macro, &micro}) ASSERT_TRUE((*m)->Update(FiveRows()).ok());
  // TP / support / predicted: class 0: 1/1/2, class 1: 1/2/1, class 2: 1/2/2.
  // F1 = 2 TP / (support + predicted): 2/3, 2/3, 1/2.
  EXPECT_EQ(Values(*none, {"a", "b", "c"}),
            (MetricValues{{"a", 2.0 / 3}, {"b", 2.0 / 3}, {"c", 0.5}}));
  EXPECT_DOUBLE_EQ(Values(*macro).at(""), (2.0 / 3 + 2.0 / 3 + 0.5) / 3);
  EXPECT_DOUBLE_EQ(Values(*micro).at(""), 3.0 / 5.0);  // single-label: micro F1 is accuracy
  // A class that neither occurs nor is predicted is left out of the values and of the mean.
  macro->Reset();
  none->Reset();
  MetricBatch two = Scores(torch::tensor({{1.f, 0.f, 0.f}, {0.f, 1.f, 0.f}}),
                           torch::tensor({0, 0}, torch::kInt64));
  ASSERT_TRUE(macro->Update(two).ok());
  ASSERT_TRUE(none->Update(two).ok());
  EXPECT_EQ(Values(*none), (MetricValues{{"0", 2.0 / 3}, {"1", 0.0}}));
  EXPECT_DOUBLE_EQ(Values(*macro).at(""), 1.0 / 3);
  auto bad = testing::Instantiate<Metric>("_target_: f1\naverage: weighted\n", "task.metrics.f1");
  EXPECT_TRUE(
      absl::StrContains(bad.status().message(), "must be one of: macro, none, micro, got weighted"))
      << bad.status();
}

TEST(ConfusionMatrix, WritesTheCountsAndPerClassAccuracyAndLogsNoValue) {
  auto matrix = Make("_target_: confusion_matrix\n");
  ASSERT_TRUE(matrix->Update(FiveRows()).ok());
  EXPECT_TRUE(Values(*matrix).empty());
  ASSERT_TRUE(matrix->Sync(Double).ok());  // as if two ranks had seen the same rows
  testing::TempDir dir;
  ASSERT_TRUE(matrix->WriteReport(dir.path() + "/out", "test", {"a", "b", "c"}).ok());
  EXPECT_EQ(testing::ReadFile(dir.path() + "/out/test_confusion_matrix.csv"),
            "true/predicted,a,b,c\na,2,0,0\nb,0,2,2\nc,2,0,2\n");
  EXPECT_EQ(testing::ReadFile(dir.path() + "/out/test_per_class_accuracy.csv"),
            "class,support,correct,accuracy\na,2,2,1\nb,4,2,0.5\nc,4,2,0.5\n");
}

TEST(ErrorRates, EditDistanceOverCodePointsAndWords) {
  EXPECT_EQ(metrics::EditDistance(std::vector<char32_t>{'k', 'i', 't', 't', 'e', 'n'},
                                  std::vector<char32_t>{'s', 'i', 't', 't', 'i', 'n', 'g'}),
            3);
  metrics::ErrorCount c = metrics::CharacterErrors("kitten", "sitting");
  EXPECT_EQ(c.errors, 3);
  EXPECT_EQ(c.reference, 7);
  c = metrics::CharacterErrors("h\xC3\xA9llo", "hello");  // é is one code point, one substitution
  EXPECT_EQ(c.errors, 1);
  EXPECT_EQ(c.reference, 5);
  metrics::ErrorCount w = metrics::WordErrors("the cat sat", "the  cat sat down");
  EXPECT_EQ(w.errors, 1);
  EXPECT_EQ(w.reference, 4);
  w = metrics::WordErrors("", "call me ishmael");
  EXPECT_EQ(w.errors, 3);
  EXPECT_EQ(metrics::CharacterErrors("abc", "").errors, 3);
}

TEST(ErrorRates, CerAndWerSumErrorsOverReferences) {
  auto cer = Make("_target_: cer\n", 0);
  auto wer = Make("_target_: wer\n", 0);
  MetricBatch texts;
  texts.predicted_texts = {"kitten", "the cat sat", "abc"};
  texts.target_texts = {"sitting", "the  cat sat down", ""};  // an empty reference adds nothing
  ASSERT_TRUE(cer->Update(texts).ok());
  ASSERT_TRUE(wer->Update(texts).ok());
  // Characters: 3 errors in "sitting" (7), "the cat sat" vs "the  cat sat down": 6 of 17.
  EXPECT_DOUBLE_EQ(Values(*cer).at(""), (3.0 + 6.0) / (7.0 + 17.0));
  EXPECT_DOUBLE_EQ(Values(*wer).at(""), (1.0 + 1.0) / (1.0 + 4.0));
  ASSERT_TRUE(wer->Sync(Double).ok());
  EXPECT_DOUBLE_EQ(Values(*wer).at(""), 2.0 / 5.0);
  texts.predicted_texts.pop_back();
  EXPECT_EQ(cer->Update(texts).message(), "cer needs a decoded text per reference, got 2 for 3");
  cer->Reset();
  EXPECT_TRUE(Values(*cer).empty());
}

TEST(TokenLoss, PerplexityAndBitsPerCharacterOverCountedTokens) {
  auto ppl = Make("_target_: perplexity\n", 0);
  auto bpc = Make("_target_: bits_per_character\n", 0);
  // Two tokens of a 2-word vocabulary, one masked out: its loss must not count.
  MetricBatch b =
      Scores(torch::tensor({{{0.f, 0.f}, {5.f, -5.f}}}), torch::tensor({{1, 1}}, torch::kInt64));
  b.mask = torch::tensor({{true, false}});
  ASSERT_TRUE(bpc->Update(b).ok());  // characters unknown: nothing
  EXPECT_TRUE(Values(*bpc).empty());
  b.characters = 2;  // the one token stands for two characters
  ASSERT_TRUE(ppl->Update(b).ok());
  ASSERT_TRUE(bpc->Update(b).ok());
  EXPECT_NEAR(Values(*ppl).at(""), 2.0, 1e-6);  // uniform over 2 words: loss ln 2 per token
  EXPECT_NEAR(Values(*bpc).at(""), 0.5, 1e-6);  // ln 2 nats over 2 characters: half a bit each
  ASSERT_TRUE(ppl->Sync(Double).ok());
  EXPECT_NEAR(Values(*ppl).at(""), 2.0, 1e-6);

  // The task's own per-position losses (MetricBatch::losses) are read as they are, under the
  // mask: the same values as from the scores, and no scores are needed for them.
  torch::Tensor logits = torch::randn({2, 5, 7});
  torch::Tensor target = torch::randint(0, 7, {2, 5}, torch::kInt64);
  MetricBatch from_scores = Scores(logits, target);
  from_scores.mask = torch::rand({2, 5}) > 0.3;
  from_scores.characters = 9;
  MetricBatch from_losses = from_scores;
  from_losses.preds = torch::Tensor();
  from_losses.losses = torch::nn::functional::cross_entropy(
                           logits.reshape({-1, 7}), target.reshape({-1}),
                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                           .view({2, 5});
  for (const std::string& name : {"perplexity", "bits_per_character"}) {
    SCOPED_TRACE(name);
    auto a = Make("_target_: " + name + "\n", 0), b = Make("_target_: " + name + "\n", 0);
    ASSERT_TRUE(a->Update(from_scores).ok());
    ASSERT_TRUE(b->Update(from_losses).ok());
    EXPECT_EQ(Values(*a).at(""), Values(*b).at(""));
  }
}

TEST(FillerRates, FalseAcceptsAndMissesOverFillerAndKeywordRows) {
  auto far = Make("_target_: false_accept_rate\nfiller_classes: [silence]\n");
  auto miss = Make("_target_: miss_rate\nfiller_classes: [silence]\n");
  ASSERT_TRUE(far->Update(FiveRows()).ok());
  ASSERT_TRUE(miss->Update(FiveRows()).ok());
  std::vector<std::string> names = {"yes", "no", "silence"};
  // Filler rows (true class 2): predicted 2 and 0, one false accept of 2. Keyword rows: 0->0,
  // 1->1, 1->2: one miss of 3.
  EXPECT_DOUBLE_EQ(Values(*far, names).at(""), 0.5);
  EXPECT_DOUBLE_EQ(Values(*miss, names).at(""), 1.0 / 3);
  EXPECT_TRUE(Values(*far).empty());  // without class names, fillers are unknown
  EXPECT_EQ(far->Compute({"yes", "no", "maybe"}).status().message(),
            "false_accept_rate: filler class 'silence' is not a class (yes, no, maybe)");
  auto none = Make("_target_: miss_rate\nfiller_classes: []\n");
  ASSERT_TRUE(none->Update(FiveRows()).ok());
  EXPECT_TRUE(Values(*none, names).empty());
}

TEST(MetricOptions, StagesAreChecked) {
  auto bad = testing::Instantiate<Metric>("_target_: accuracy\nstages: [val, testing]\n",
                                          "task.metrics.acc");
  EXPECT_TRUE(absl::StrContains(
      bad.status().message(),
      "option 'task.metrics.acc.stages' of metric 'accuracy' must be a list of strings "
      "(each one of: train, val, test)"))
      << bad.status();
  auto unknown = testing::Instantiate<Metric>("_target_: acuracy\n", "task.metrics.acc");
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "did you mean 'accuracy'"))
      << unknown.status();
}

config::NodePtr Yaml(const std::string& text) {
  auto node = config::ParseYaml(text, "task.yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : config::Node::Null();
}

struct NamedClasses : data::DataModule {
  absl::Status Setup(data::Stage) override { return absl::OkStatus(); }
  std::vector<std::string> class_names() const override { return {"a", "b", "c"}; }
  data::LoaderOptions loader_options() const override { return {}; }
};

TEST(MetricCollection, StagesNamesAndEpochs) {
  MetricCollection metrics;
  ASSERT_TRUE(metrics
                  .Build(Yaml("acc: {_target_: accuracy, stages: [train, val, test]}\n"
                              "f1_class: {_target_: f1, average: none, stages: [test]}\n"
                              "top2: {_target_: top_k_accuracy, k: 2}\n"
                              "left_out: null\n"),
                         "task.metrics", MetricSetup{3})
                  .ok());
  NamedClasses data;
  metrics.Connect(data);
  // Training: each batch's own value, weighted by its rows.
  MetricLog train;
  ASSERT_TRUE(metrics.Update("train", FiveRows(), train).ok());
  ASSERT_TRUE(
      metrics
          .Update("train",
                  Scores(torch::tensor({{1.f, 0.f, 0.f}}), torch::tensor({0}, torch::kInt64)),
                  train)
          .ok());
  EXPECT_EQ(train.last(), (std::map<std::string, double>{{"train/acc", 1.0}}));
  EXPECT_DOUBLE_EQ(train.EpochMeans().at("train/acc"), (0.6 * 5 + 1.0) / 6);
  // ... and over the epoch's state at its end (4 of 6 rows right; summed over ranks: doubled).
  auto train_epoch = metrics.Compute("train", Double);
  ASSERT_TRUE(train_epoch.ok()) << train_epoch.status();
  EXPECT_EQ(*train_epoch, (std::map<std::string, double>{{"train/acc", 4.0 / 6}}));
  EXPECT_EQ(metrics.StateDict().at("train/acc/total").item<int64_t>(), 12);
  // The next training epoch starts afresh.
  ASSERT_TRUE(
      metrics
          .Update("train",
                  Scores(torch::tensor({{0.f, 1.f, 0.f}}), torch::tensor({0}, torch::kInt64)),
                  train)
          .ok());
  EXPECT_DOUBLE_EQ(metrics.Compute("train", nullptr)->at("train/acc"), 0.0);
  // Validation: over the epoch, summed over ranks (here: doubled).
  MetricLog log;
  ASSERT_TRUE(metrics.Update("val", FiveRows(), log).ok());
  EXPECT_TRUE(log.EpochMeans().empty());
  auto val = metrics.Compute("val", Double);
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(*val, (std::map<std::string, double>{{"val/acc", 0.6}, {"val/top2", 1.0}}));
  // The next epoch starts afresh with its first batch.
  ASSERT_TRUE(
      metrics
          .Update("val",
                  Scores(torch::tensor({{0.f, 1.f, 0.f}}), torch::tensor({0}, torch::kInt64)), log)
          .ok());
  EXPECT_DOUBLE_EQ(metrics.Compute("val", nullptr)->at("val/acc"), 0.0);
  // An epoch without batches has no values (not the last epoch's).
  EXPECT_TRUE(metrics.Compute("val", nullptr)->empty());
  // Test: per-class values are named by the data's classes.
  ASSERT_TRUE(metrics.Update("test", FiveRows(), log).ok());
  auto state = metrics.StateDict();
  EXPECT_EQ(state.at("test/f1_class/counts").sum().item<int64_t>(), 5);
  auto test = metrics.Compute("test", nullptr);
  ASSERT_TRUE(test.ok());
  EXPECT_DOUBLE_EQ(test->at("test/f1_class/c"), 0.5);
  EXPECT_EQ(test->count("test/left_out"), 0u);
  EXPECT_EQ(test->size(), 5u);  // acc, top2, f1_class/a, /b, /c
  // The state round-trips through the collection.
  metrics.Update("test", FiveRows(), log).IgnoreError();
  ASSERT_TRUE(metrics.LoadStateDict(state).ok());
  EXPECT_DOUBLE_EQ(metrics.Compute("test", nullptr)->at("test/acc"), 0.6);
}

TEST(MetricCollection, RefusesWhatATaskCannotGive) {
  MetricCollection metrics;
  EXPECT_EQ(metrics.Build(Yaml("f1: {_target_: f1}\n"), "task.metrics", MetricSetup{}).message(),
            "metric 'task.metrics.f1': f1 counts per class: it needs a classification task (one "
            "with num_classes)");
  EXPECT_EQ(metrics.Build(Yaml("[accuracy]\n"), "task.metrics", MetricSetup{}).message(),
            "'task.metrics' must be a mapping of name: {_target_: METRIC, ...}");
  EXPECT_TRUE(metrics.Build(nullptr, "task.metrics", MetricSetup{}).ok());
  // A stage listed twice runs once.
  ASSERT_TRUE(metrics
                  .Build(Yaml("acc: {_target_: accuracy, stages: [val, val]}\n"), "task.metrics",
                         MetricSetup{})
                  .ok());
  MetricLog log;
  ASSERT_TRUE(metrics.Update("val", FiveRows(), log).ok());
  EXPECT_EQ(metrics.StateDict().at("val/acc/total").item<int64_t>(), 5);
}

TEST(CrossEntropyLoss, MatchesTorchWithLabelSmoothing) {
  auto loss =
      testing::InstantiateOk<Loss>("_target_: cross_entropy\nlabel_smoothing: 0.1\n", "task.loss");
  ASSERT_NE(loss, nullptr);
  MetricBatch b = FiveRows();
  torch::Tensor expected = torch::nn::functional::cross_entropy(
      b.preds, b.target, torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(0.1));
  EXPECT_TRUE(torch::equal(loss->Forward(b.preds, b.target), expected));
  auto bad =
      testing::Instantiate<Loss>("_target_: cross_entropy\nlabel_smoothing: 1\n", "task.loss");
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "must be in [0, 1), got 1"))
      << bad.status();
}

}  // namespace metrics_test
}  // namespace kiln
