// Reusing weights: model.init_from loads a safetensors file or a kiln checkpoint partially
// (init_ignore), under renamed prefixes (init_map), strictly or not, and refuses shape
// mismatches, missing entries and globs that match nothing in one line; freezing globs;
// `kiln average`'s mean agrees with a hand computation and refuses checkpoints of other models.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "lib/trainer/freezing.h"
#include "lib/trainer/pretrained_weights.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/checkpoint_average.h"
#include "lib/weights/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace reusing_weights_test {

// features (Linear + BatchNorm1d) and a head whose width is the number of classes.
struct Net : torch::nn::Module {
  explicit Net(int64_t classes, const std::string& body = "features") {
    features = register_module(
        body, torch::nn::Sequential(torch::nn::Linear(4, 6), torch::nn::BatchNorm1d(6)));
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
  EXPECT_TRUE(torch::equal(target.features[0]->as<torch::nn::Linear>()->weight,
                           source.features[0]->as<torch::nn::Linear>()->weight));
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
            "model.init_from a.safetensors: 'head.weight' is [5, 6] there and [3, 6] in the model; "
            "to keep the model's, list it "
            "in model.init_ignore (e.g. model.init_ignore=[head.*])");
}

TEST(PretrainedWeights, PrefixRenamesMapTheFilesNamesToTheModels) {
  torch::manual_seed(2);
  Net source(3, "backbone"), target(3);
  auto report =
      LoadPretrainedWeights(StateOf(source), target, {"f", {}, {{"backbone.", "features."}}, true});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->Count("loaded"), 9);
  EXPECT_TRUE(torch::equal(target.features[1]->as<torch::nn::BatchNorm1d>()->weight,
                           source.features[1]->as<torch::nn::BatchNorm1d>()->weight));
  // Without the rename nothing matches: refused, naming init_map.
  auto none = LoadPretrainedWeights(StateOf(source), target, {"f", {"head.*"}, {}, false});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(Message(none.status()).find("checkpoint of another model"), std::string::npos)
      << none.status();
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
            "model.init_from f: the model's 'head.weight' and 1 more are not in the file; list "
            "them in model.init_ignore "
            "(e.g. [head.*]) or set model.init_strict=false");
  auto lenient = LoadPretrainedWeights(state, target, {"f", {}, {}, false});
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->Count("missing"), 2);
}

TEST(PretrainedWeights, GlobsAndPrefixesThatMatchNothingAreRefused) {
  Net source(3), target(3);
  auto glob = LoadPretrainedWeights(StateOf(source), target, {"f", {"haed.*"}, {}, true});
  ASSERT_FALSE(glob.ok());
  EXPECT_NE(Message(glob.status()).find("model.init_ignore: 'haed.*' matches no name"),
            std::string::npos);
  auto prefix =
      LoadPretrainedWeights(StateOf(source), target, {"f", {}, {{"body.", "features."}}, true});
  ASSERT_FALSE(prefix.ok());
  EXPECT_NE(Message(prefix.status()).find("model.init_map: prefix 'body.' matches no name"),
            std::string::npos);
  auto freeze = ParametersMatching(target, {"features.*", "fetaures.*"}, "model.freeze");
  ASSERT_FALSE(freeze.ok());
  EXPECT_NE(
      Message(freeze.status()).find("model.freeze: 'fetaures.*' matches no parameter of the model"),
      std::string::npos);
}

TEST(PretrainedWeights, ReadsKilnCheckpointsAndSafetensorsAlike) {
  testing::TempDir dir;
  torch::manual_seed(3);
  Net source(3);
  ASSERT_TRUE(
      WriteCheckpoint(dir.path() + "/a.ckpt", [&](torch::serialize::OutputArchive& archive) {
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

// Three checkpoints of one model, written with known weights and BatchNorm counters.
std::vector<std::string> WriteThree(const std::string& dir,
                                    std::vector<std::map<std::string, torch::Tensor>>* states) {
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    torch::manual_seed(10 + i);
    Net net(3);
    net.features[1]->as<torch::nn::BatchNorm1d>()->running_mean.uniform_();
    net.features[1]->as<torch::nn::BatchNorm1d>()->num_batches_tracked.fill_(100 * (i + 1));
    states->push_back(StateOf(net));
    paths.push_back(dir + "/epoch=" + std::to_string(i) + ".ckpt");
    EXPECT_TRUE(WriteCheckpoint(paths.back(), [&](torch::serialize::OutputArchive& archive) {
                  archive.write("meta/format", c10::IValue(kCheckpointFormat));
                  archive.write("meta/model", c10::IValue(std::string("net")));
                  archive.write("loop/global_step", c10::IValue(int64_t{10 * (i + 1)}));
                  WriteModelState(net, archive);
                }).ok());
  }
  return paths;
}

TEST(CheckpointAverage, IsTheElementWiseMeanAndKeepsTheLastCounter) {
  testing::TempDir dir;
  std::vector<std::map<std::string, torch::Tensor>> states;
  std::vector<std::string> paths = WriteThree(dir.path(), &states);
  auto averaged = AverageCheckpoints(paths);
  ASSERT_TRUE(averaged.ok()) << averaged.status();
  EXPECT_EQ(averaged->model_name, "net");
  ASSERT_EQ(averaged->state.size(), 9u);
  for (const auto& [name, t] : averaged->state) {
    if (name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(t.item<int64_t>(), 300);
      continue;
    }
    // By hand: one element at a time, in double.
    torch::Tensor a = states[0][name].flatten(), b = states[1][name].flatten(),
                  c = states[2][name].flatten();
    torch::Tensor got = t.flatten();
    ASSERT_EQ(got.scalar_type(), torch::kFloat32) << name;
    for (int64_t k = 0; k < got.numel(); ++k) {
      double mean = (a[k].item<double>() + b[k].item<double>() + c[k].item<double>()) / 3.0;
      EXPECT_EQ(got[k].item<float>(), static_cast<float>(mean)) << name << "[" << k << "]";
    }
  }
  // Written and read back as a checkpoint of the same model.
  ASSERT_TRUE(WriteAveragedCheckpoint(dir.path() + "/avg.ckpt", *averaged, paths).ok());
  torch::serialize::InputArchive archive;
  ASSERT_TRUE(ReadCheckpoint(dir.path() + "/avg.ckpt", &archive).ok());
  Net net(3);
  auto state = ReadModelState(archive, "avg.ckpt");
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(LoadModelState(*state, net, "avg.ckpt").ok());
  EXPECT_TRUE(torch::equal(net.head->weight, averaged->state.at("head.weight")));
  // last_n picks the newest by optimizer steps, oldest first, and leaves the average out.
  auto newest = NewestCheckpoints(dir.path(), 2);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(*newest, (std::vector<std::string>{paths[1], paths[2]}));
  EXPECT_FALSE(NewestCheckpoints(dir.path(), 4).ok());
}

TEST(CheckpointAverage, CheckpointsOfDifferentModelsAreRefusedInOneLine) {
  testing::TempDir dir;
  std::vector<std::map<std::string, torch::Tensor>> states;
  std::vector<std::string> paths = WriteThree(dir.path(), &states);
  Net other(5);
  std::string odd = dir.path() + "/other.ckpt";
  ASSERT_TRUE(WriteCheckpoint(odd, [&](torch::serialize::OutputArchive& archive) {
                archive.write("meta/format", c10::IValue(kCheckpointFormat));
                archive.write("meta/model", c10::IValue(std::string("net")));
                WriteModelState(other, archive);
              }).ok());
  auto refused = AverageCheckpoints({paths[0], odd});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(Message(refused.status()), "kiln average: " + paths[0] + " and " + odd +
                                           " hold different models: 'head.bias' is [3] and [5]");
  EXPECT_FALSE(AverageCheckpoints({paths[0]}).ok());
}

}  // namespace reusing_weights_test
}  // namespace kiln
