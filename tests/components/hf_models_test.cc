// Hugging Face checkpoints into kiln: a tiny random model made and save_pretrained()ed by
// transformers itself (tests/components/hf/make_models.py) gives kiln the logits transformers
// gives, tied or untied, in one file or in shards. Skipped, with a message, only where the .venv
// has no transformers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include "components/models/model.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "lib/weights/hf_export.h"
#include "lib/weights/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace hf_models_test {

const char kPython[] = KILN_PYTHON_EXE;
const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tests/components/hf/make_models.py";
const std::string kCheckExport =
    std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_export.py";

absl::StatusOr<std::shared_ptr<Model>> Pretrained(const std::string& family,
                                                  const std::string& dir) {
  auto node =
      config::ParseYaml("_target_: " + family + "\npretrained: '" + dir + "'\n", "model.yaml");
  if (!node.ok()) return node.status();
  return Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
}

class HfModels : public ::testing::Test {
 protected:
  // transformers makes every variant once (its import takes seconds).
  static void SetUpTestSuite() {
    auto probe = testing::RunProcess({kPython, "-c", "import transformers"});
    if (probe.exit_code != 0) {
      skip_ = "Python transformers not installed: " + probe.err;
      return;
    }
    dir_ = new testing::TempDir();
    made_ = testing::RunProcess({kPython, kScript, "gpt2", dir_->path()});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(made_.exit_code, 0) << made_.err;
  }
  // kiln's logits on the ids transformers' model saw, for the variant `how`.
  void ExpectSameLogits(const std::string& family, const std::string& how) {
    const std::string dir = dir_->path() + "/" + how;
    auto reference = ReadSafetensors(dir + "/logits.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    auto model = Pretrained(family, dir + "/model");
    ASSERT_TRUE(model.ok()) << model.status();
    (*model)->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor logits = (*model)->forward(reference->at("ids"));
    const torch::Tensor& expected = reference->at("logits");
    ASSERT_EQ(logits.sizes(), expected.sizes());
    EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-5) << family << " " << how;
    EXPECT_EQ((*model)->token_ids().size, expected.size(-1));
  }
  static inline std::string skip_;
  static inline testing::TempDir* dir_ = nullptr;
  static inline testing::ProcessResult made_;
};

// One test for the three variants: ctest runs each test in a process of its own, and each would
// import transformers again.
TEST_F(HfModels, Gpt2GivesTransformersLogitsTiedUntiedAndInShards) {
  ExpectSameLogits("gpt2", "tied");
  ExpectSameLogits("gpt2", "untied");
  std::ifstream index(dir_->path() + "/sharded/model/model.safetensors.index.json");
  EXPECT_TRUE(index.good()) << "transformers wrote one file; the shard size is too large";
  ExpectSameLogits("gpt2", "sharded");
}

absl::StatusOr<std::shared_ptr<Model>> Instantiate(const std::string& yaml) {
  auto node = config::ParseYaml(yaml, "model.yaml");
  if (!node.ok()) return node.status();
  return Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
}

// kiln's own gpt, random, written by its exporter (what `kiln export format=hf` writes):
// transformers loads it with nothing missing or left over, and its logits are kiln's, tied and
// untied.
TEST(HfExport, KilnsGptLoadsInTransformersWithKilnsLogits) {
  auto probe = testing::RunProcess({kPython, "-c", "import transformers"});
  if (probe.exit_code != 0) GTEST_SKIP() << "Python transformers not installed: " << probe.err;
  testing::TempDir tmp;
  std::vector<std::shared_ptr<Model>> models;
  std::vector<std::string> argv = {kPython, kCheckExport};
  for (const char* tie : {"true", "false"}) {
    torch::manual_seed(7);
    auto model = Instantiate(std::string("_target_: gpt\nvocab_size: 41\nblock_size: 16\ndim: 16\n"
                                         "depth: 2\nheads: 2\nmlp_dim: 24\ntie_weights: ") +
                             tie + "\n");
    ASSERT_TRUE(model.ok()) << model.status();
    const HfExporter* exporter = FindHfExporter("gpt");
    ASSERT_NE(exporter, nullptr);
    auto folder = (*exporter)(**model);
    ASSERT_TRUE(folder.ok()) << folder.status();
    const std::string dir = tmp.path() + "/export_tied_" + tie;
    ASSERT_TRUE(WriteHfFolder(*folder, dir).ok());
    models.push_back(*model);
    argv.push_back(dir);
  }
  auto checked = testing::RunProcess(argv);
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  for (size_t i = 0; i < models.size(); ++i) {
    auto reference = ReadSafetensors(argv[2 + i] + "/transformers_logits.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    models[i]->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor logits = models[i]->forward(reference->at("ids"));
    EXPECT_LT((logits - reference->at("logits")).abs().max().item<double>(), 1e-5) << argv[2 + i];
  }
}

TEST(HfModelsErrors, WhatIsNotAGpt2FolderIsOneLine) {
  testing::TempDir dir;
  // config.json as `json` (none when empty): model=gpt2 on the folder fails with `expected`.
  auto expect_refused = [&dir](const std::string& json, const std::string& expected) {
    if (!json.empty()) std::ofstream(dir.path() + "/config.json") << json;
    auto model = Pretrained("gpt2", dir.path());
    ASSERT_FALSE(model.ok()) << json;
    EXPECT_NE(std::string(model.status().message()).find(expected), std::string::npos)
        << model.status();
  };
  // GPT-2's sizes with `heads` attention heads.
  auto sizes = [](int heads) {
    return "\"vocab_size\": 8, \"n_positions\": 4, \"n_embd\": 8, \"n_layer\": 1, \"n_head\": " +
           std::to_string(heads);
  };
  expect_refused("", "holds no config.json");
  expect_refused("{\"model_type\": \"llama\", \"vocab_size\": 8}", "model_type is \"llama\"");
  expect_refused("{\"model_type\": \"gpt2\", " + sizes(2) + ", \"activation_function\": \"relu\"}",
                 "activation_function is \"relu\"");
  expect_refused("{\"model_type\": \"gpt2\", " + sizes(3) + "}", "multiple of n_head");
  // 1e-05 without a dot: YAML 1.1 reads it as a string; it is still the number JSON means.
  expect_refused("{\"model_type\": \"gpt2\", " + sizes(2) + ", \"layer_norm_epsilon\": 1e-05}",
                 "neither model.safetensors");
  expect_refused("{\"model_type\": [1, ", "config.json");
}

}  // namespace hf_models_test
}  // namespace kiln
