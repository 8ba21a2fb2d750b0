// CTC speech recognition parts: greedy and prefix beam-search decoding (checked against the
// exact most probable label sequence, summed over all frame paths by brute force) and the
// conv_bilstm acoustic model (output lengths follow the time strides; padding changes nothing
// for the real frames in either direction). The error rates are tested with the metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "components/models/model.h"
#include "tasks/speech/ctc_decode.h"
#include "tasks/speech/ngram_lm.h"
#include "tests/components/instantiate.h"

namespace kiln {
namespace ctc_test {

using kiln::testing::InstantiateOk;

// log-probabilities of per-frame distributions given as probabilities.
torch::Tensor LogProbs(const std::vector<std::vector<double>>& probs) {
  std::vector<double> flat;
  for (const auto& frame : probs) flat.insert(flat.end(), frame.begin(), frame.end());
  return torch::tensor(flat, torch::kFloat64)
      .reshape({static_cast<int64_t>(probs.size()), static_cast<int64_t>(probs[0].size())})
      .log();
}

// The label sequence of highest probability, summing every frame path that collapses to it.
std::vector<int64_t> BruteForceBest(const torch::Tensor& log_probs, int64_t blank) {
  const int64_t frames = log_probs.size(0), classes = log_probs.size(1);
  std::map<std::vector<int64_t>, double> total;
  std::vector<int64_t> path(static_cast<size_t>(frames), 0);
  int64_t paths = 1;
  for (int64_t t = 0; t < frames; ++t) paths *= classes;
  for (int64_t n = 0; n < paths; ++n) {
    int64_t rest = n;
    double logp = 0;
    for (int64_t t = 0; t < frames; ++t) {
      path[static_cast<size_t>(t)] = rest % classes;
      rest /= classes;
      logp += log_probs[t][path[static_cast<size_t>(t)]].item<double>();
    }
    std::vector<int64_t> labels;
    int64_t previous = blank;
    for (int64_t c : path) {
      if (c != blank && c != previous) labels.push_back(c);
      previous = c;
    }
    total[labels] += std::exp(logp);
  }
  auto best = total.begin();
  for (auto it = total.begin(); it != total.end(); ++it)
    if (it->second > best->second) best = it;
  return best->first;
}

TEST(CtcDecode, GreedyMergesRepeatsAndDropsBlanks) {
  // Best classes per frame: 1 1 0 1 2 2 0 -> labels 1 1 2.
  torch::Tensor lp = torch::full({7, 3}, -5.0, torch::kFloat64);
  std::vector<int64_t> best = {1, 1, 0, 1, 2, 2, 0};
  for (int64_t t = 0; t < 7; ++t) lp[t][best[static_cast<size_t>(t)]] = -0.1;
  EXPECT_EQ(speech::CtcGreedyDecode(lp, 0), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(speech::CtcBeamSearch(lp, 0, 4), (std::vector<int64_t>{1, 1, 2}));
}

TEST(CtcDecode, BeamSearchSumsPathsWhereGreedyTakesOne) {
  // Blank is each frame's best (greedy: nothing), but "a" has 0.4*0.6 + 0.6*0.4 + 0.4*0.4 = 0.64.
  torch::Tensor lp = LogProbs({{0.6, 0.4}, {0.6, 0.4}});
  EXPECT_TRUE(speech::CtcGreedyDecode(lp, 0).empty());
  EXPECT_EQ(speech::CtcBeamSearch(lp, 0, 4), (std::vector<int64_t>{1}));
  EXPECT_EQ(BruteForceBest(lp, 0), (std::vector<int64_t>{1}));
}

TEST(CtcDecode, WideBeamFindsTheMostProbableLabelSequence) {
  torch::manual_seed(7);
  int differs_from_greedy = 0;
  for (int trial = 0; trial < 30; ++trial) {
    // Flat-ish distributions over blank and 2 labels make greedy and exact often disagree.
    torch::Tensor lp = torch::log_softmax(torch::randn({6, 3}, torch::kFloat64) * 0.8, 1);
    std::vector<int64_t> exact = BruteForceBest(lp, 0);
    EXPECT_EQ(speech::CtcBeamSearch(lp, 0, 64), exact) << "trial " << trial;
    differs_from_greedy += speech::CtcGreedyDecode(lp, 0) != exact;
  }
  EXPECT_GT(differs_from_greedy, 0);  // the check above is not greedy's answer in disguise
}

TEST(NgramLm, DistributionsSumToOneAndFavorSeenContinuations) {
  // Ids: 0 pad, 2 bos, 3 eos; "letters" 5..9.
  speech::NgramLm lm(3, 10, 2, 3);
  for (int i = 0; i < 20; ++i) lm.Add({5, 6, 7});
  lm.Add({5, 6, 8});
  lm.Add({9});
  EXPECT_EQ(lm.sentences(), 22);
  for (const std::vector<int64_t>& history :
       std::vector<std::vector<int64_t>>{{}, {5}, {5, 6}, {9, 9, 9}, {7, 5, 6}}) {
    double sum = 0;
    for (int64_t w = 0; w < 10; ++w) sum += std::exp(lm.LogProb(history, w));
    EXPECT_NEAR(sum, 1.0, 1e-9) << "history size " << history.size();
  }
  // After "5 6": 7 twenty times, 8 once; Witten-Bell: (20 + 2 P(7|6)) / (21 + 2).
  EXPECT_GT(lm.LogProb({5, 6}, 7), std::log(0.85));
  EXPECT_GT(lm.LogProb({5, 6}, 8), lm.LogProb({5, 6}, 9));  // seen once beats never seen
  EXPECT_GT(lm.LogProb({5, 6, 7}, 3), std::log(0.8));       // the sentence ends after 7
  EXPECT_LT(lm.LogProb({}, 0), std::log(0.01));             // never seen: only the uniform share
  // Exactly, for 8 after "5 6": unigram counts 5:21 6:21 7:20 8:1 9:1 eos:22 (86, 6 types); after
  // "6" and after "5 6": 7 twenty times, 8 once (21, 2 types).
  const double p1 = (1 + 6 * 0.1) / (86 + 6), p2 = (1 + 2 * p1) / (21 + 2), p3 = (1 + 2 * p2) / 23;
  EXPECT_NEAR(lm.LogProb({5, 6}, 8), std::log(p3), 1e-12);
  EXPECT_NEAR(lm.LogProb({9, 9, 6}, 8), std::log(p2), 1e-12);  // "9 6" never seen: falls back
  // Nothing counted: the uniform distribution.
  EXPECT_NEAR(speech::NgramLm(3, 10, 2, 3).LogProb({5}, 7), std::log(0.1), 1e-12);
}

TEST(CtcDecode, LanguageModelFusionPicksTheLikelySentence) {
  // Two frames that sound a bit more like 5 than like 6 (0 is the blank).
  torch::Tensor lp = LogProbs({{0.1, 0, 0, 0, 0, 0.48, 0.42}, {0.9, 0, 0, 0, 0, 0.05, 0.05}});
  EXPECT_EQ(speech::CtcBeamSearch(lp, 0, 4), (std::vector<int64_t>{5}));
  speech::NgramLm lm(2, 7, 2, 3);
  for (int i = 0; i < 10; ++i) lm.Add({6});
  EXPECT_EQ(speech::CtcBeamSearch(lp, 0, 4, {&lm, 0.5, 0.0}), (std::vector<int64_t>{6}));
  // A weight of 0 and no bonus is the plain search.
  EXPECT_EQ(speech::CtcBeamSearch(lp, 0, 4, {&lm, 0.0, 0.0}), (std::vector<int64_t>{5}));
}

TEST(ConvBiLstm, OutputLengthsFollowTheStridesAndPaddingChangesNothing) {
  auto model = std::dynamic_pointer_cast<SequenceModel>(InstantiateOk<Model>(
      "_target_: conv_bilstm\nfeatures: 20\nchannels: 4\ntime_strides: [2, 1]\nhidden: 8\n"
      "layers: 2\ndropout: 0.0\nnum_classes: 6\n",
      "model"));
  ASSERT_NE(model, nullptr);
  model->eval();
  torch::manual_seed(3);
  torch::Tensor a = torch::randn({1, 40, 20}), b = torch::randn({1, 25, 20});
  torch::Tensor batch = torch::zeros({2, 40, 20});
  batch[0].copy_(a[0]);
  batch.narrow(1, 0, 25)[1].copy_(b[0]);
  auto [logits, lengths] = model->forward_padded(batch, torch::tensor({40, 25}, torch::kInt64));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 20, 6}));
  EXPECT_EQ(lengths[0].item<int64_t>(), 20);
  EXPECT_EQ(lengths[1].item<int64_t>(), 13);
  // Each utterance alone, unpadded: the same outputs on its real frames.
  auto [alone_a, len_a] = model->forward_padded(a, torch::tensor({40}, torch::kInt64));
  auto [alone_b, len_b] = model->forward_padded(b, torch::tensor({25}, torch::kInt64));
  EXPECT_EQ(len_b[0].item<int64_t>(), 13);
  EXPECT_TRUE(torch::allclose(logits[0], alone_a[0], 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(logits[1].narrow(0, 0, 13), alone_b[0], 1e-5, 1e-6));
  // The backward direction matters: the first frame's output depends on the last real frame.
  torch::Tensor changed = b.clone();
  changed[0][24] += 1.0;
  auto [other, unused] = model->forward_padded(changed, torch::tensor({25}, torch::kInt64));
  EXPECT_FALSE(torch::allclose(other[0][0], alone_b[0][0]));
}

TEST(ConvBiLstm, BadOptionsAreNamed) {
  auto bad = kiln::testing::Instantiate<Model>(
      "_target_: conv_bilstm\nfeatures: 20\ntime_strides: [2, 0]\nnum_classes: 6\n", "model");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.time_strides"), std::string::npos) << bad.status();
}

}  // namespace ctc_test
}  // namespace kiln
