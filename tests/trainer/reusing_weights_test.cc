// Reusing weights: model.init_from loads a safetensors file or a kiln checkpoint partially
// (init_ignore), under renamed prefixes (init_map), strictly or not, and refuses shape
// mismatches, missing entries and globs that match nothing in one line; freezing globs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "lib/trainer/checkpoint.h"
#include "lib/trainer/freezing.h"
#include "lib/trainer/pretrained_weights.h"
#include "lib/trainer/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

// features (Linear + BatchNorm1d) and a head whose width is the number of classes.
struct Net : torch::nn::Module {
  explicit Net(int64_t classes, const std::string& body = "features") {
    features = register_module(body, torch::nn::Sequential(torch::nn::Linear(4, 6), torch::nn::BatchNorm1d(6)));
    head = register_module("head", torch::nn::Linear(6, classes));
  }
  torch::nn::Sequential features{nullptr};
  torch::nn::Linear head{nullptr};
};

std::map<std::string, torch::Tensor> StateOf(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : StateDict(m)) out[name] = t.detach().clone();
  return out;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(PretrainedWeights, IgnoredHeadKeepsItsInitAndTheRestIsLoaded) {
  torch::manual_seed(1);
  Net source(5), target(3);
  torch::Tensor head_before = target.head->weight.detach().clone();
  auto report = LoadPretrainedWeights(StateOf(source), target, {"src", {"head.*"}, {}, true});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(torch::equal(target.features[0]->as<torch::nn::Linear>()->weight, source.features[0]->as<torch::nn::Linear>()->weight));
  EXPECT_TRUE(torch::equal(target.head->weight, head_before));
  EXPECT_EQ(report->Count("loaded"), 7);   // linear w, b; bn w, b, mean, var, count
  EXPECT_EQ(report->Count("ignored"), 2);  // the head: the model's, at the file's shape
  EXPECT_NE(report->Table().find("ignored    head.weight"), std::string::npos) << report->Table();
}

TEST(PretrainedWeights, ShapeMismatchNamesTheParameterBothShapesAndTheOption) {
  Net source(5), target(3);
  auto report = LoadPretrainedWeights(StateOf(source), target, {"a.safetensors", {}, {}, true});
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(Message(report.status()),
            "model.init_from a.safetensors: 'head.weight' is [5, 6] there and [3, 6] in the model; to keep the model's, list it "
            "in model.init_ignore (e.g. model.init_ignore=[head.*])");
}

TEST(PretrainedWeights, PrefixRenamesMapTheFilesNamesToTheModels) {
  torch::manual_seed(2);
  Net source(3, "backbone"), target(3);
  auto report = LoadPretrainedWeights(StateOf(source), target, {"f", {}, {{"backbone.", "features."}}, true});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->Count("loaded"), 9);
  EXPECT_TRUE(torch::equal(target.features[1]->as<torch::nn::BatchNorm1d>()->weight,
                           source.features[1]->as<torch::nn::BatchNorm1d>()->weight));
  // Without the rename nothing matches: refused, naming init_map.
  auto none = LoadPretrainedWeights(StateOf(source), target, {"f", {"head.*"}, {}, false});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(Message(none.status()).find("checkpoint of another model"), std::string::npos) << none.status();
  EXPECT_NE(Message(none.status()).find("model.init_map"), std::string::npos) << none.status();
}

TEST(PretrainedWeights, MissingEntriesAreRefusedWhenStrictAndReportedOtherwise) {
  Net source(3), target(3);
  auto state = StateOf(source);
  state.erase("head.weight");
  state.erase("head.bias");
  auto strict = LoadPretrainedWeights(state, target, {"f", {}, {}, true});
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(Message(strict.status()),
            "model.init_from f: the model's 'head.weight' and 1 more are not in the file; list them in model.init_ignore "
            "(e.g. [head.*]) or set model.init_strict=false");
  auto lenient = LoadPretrainedWeights(state, target, {"f", {}, {}, false});
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->Count("missing"), 2);
}

TEST(PretrainedWeights, GlobsAndPrefixesThatMatchNothingAreRefused) {
  Net source(3), target(3);
  auto glob = LoadPretrainedWeights(StateOf(source), target, {"f", {"haed.*"}, {}, true});
  ASSERT_FALSE(glob.ok());
  EXPECT_NE(Message(glob.status()).find("model.init_ignore: 'haed.*' matches no name"), std::string::npos);
  auto prefix = LoadPretrainedWeights(StateOf(source), target, {"f", {}, {{"body.", "features."}}, true});
  ASSERT_FALSE(prefix.ok());
  EXPECT_NE(Message(prefix.status()).find("model.init_map: prefix 'body.' matches no name"), std::string::npos);
  auto freeze = ParametersMatching(target, {"features.*", "fetaures.*"}, "model.freeze");
  ASSERT_FALSE(freeze.ok());
  EXPECT_NE(Message(freeze.status()).find("model.freeze: 'fetaures.*' matches no parameter of the model"),
            std::string::npos);
}

TEST(PretrainedWeights, ReadsKilnCheckpointsAndSafetensorsAlike) {
  testing::TempDir dir;
  torch::manual_seed(3);
  Net source(3);
  ASSERT_TRUE(WriteCheckpoint(dir.path() + "/a.ckpt", [&](torch::serialize::OutputArchive& archive) {
                archive.write("meta/format", c10::IValue(kCheckpointFormat));
                WriteModelState(source, archive);
              }).ok());
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/a.safetensors", StateDict(source)).ok());
  for (const char* name : {"/a.ckpt", "/a.safetensors"}) {
    auto state = ReadPretrainedWeights(dir.path() + name);
    ASSERT_TRUE(state.ok()) << state.status();
    Net target(3);
    ASSERT_TRUE(LoadPretrainedWeights(*state, target, {name, {}, {}, true}).ok());
    EXPECT_TRUE(torch::equal(target.head->weight, source.head->weight)) << name;
  }
  EXPECT_FALSE(ReadPretrainedWeights(dir.path() + "/none.ckpt").ok());
}

TEST(Freezing, BatchNormsWithinFrozenNamesAreFound) {
  Net net(3);
  auto names = ParametersMatching(net, {"features.*"}, "model.freeze");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 4u);
  EXPECT_EQ(BatchNormsWithin(net, *names).size(), 1u);
  EXPECT_EQ(BatchNormsWithin(net, {"features.1.weight"}).size(), 0u);  // its bias still trains
  SetTrainable(net, *names, false);
  EXPECT_TRUE(AnyTrainable(net));
  EXPECT_FALSE(net.features[0]->as<torch::nn::Linear>()->weight.requires_grad());
}

}  // namespace
}  // namespace kiln
