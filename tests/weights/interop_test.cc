// A kiln ResNet-18 exported to safetensors gives the same logits in Python's
// torchvision.models.resnet18, and weights made in torchvision give the same logits in kiln.
// Skipped, with a message, only when the .venv's torch / torchvision are absent.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "components/models/model.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace interop_test {

const char kPython[] = KILN_PYTHON_EXE;
const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tests/weights/torchvision_interop.py";

std::shared_ptr<Model> Resnet18() {
  auto node = config::ParseYaml("_target_: resnet\ndepth: 18\nnum_classes: 10\n", "model.yaml");
  auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

class Interop : public ::testing::Test {
 protected:
  void SetUp() override {
    auto probe = testing::RunProcess({kPython, "-c", "import torch, torchvision"});
    if (probe.exit_code != 0)
      GTEST_SKIP() << "Python torch/torchvision not installed: " << probe.err;
    torch::manual_seed(5);
    input_ = torch::randn({2, 3, 64, 64});
    ASSERT_TRUE(WriteSafetensors(dir_.path() + "/input.safetensors", {{"input", input_}}).ok());
  }

  torch::Tensor PythonLogits(const std::string& mode) {
    auto r = testing::RunProcess({kPython, kScript, mode, dir_.path()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto read = ReadSafetensors(dir_.path() + "/logits.safetensors");
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? read->at("logits") : torch::Tensor();
  }

  testing::TempDir dir_;
  torch::Tensor input_;
};

TEST_F(Interop, KilnWeightsGiveTheSameLogitsInTorchvision) {
  torch::manual_seed(2);
  auto model = Resnet18();
  model->train();
  {
    torch::NoGradGuard no_grad;  // non-default BatchNorm statistics, so buffers are checked too
    for (int i = 0; i < 3; ++i) model->forward(torch::randn({4, 3, 64, 64}));
  }
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor ours = model->forward(input_);
  ASSERT_TRUE(WriteSafetensors(dir_.path() + "/weights.safetensors", StateDict(*model)).ok());
  torch::Tensor theirs = PythonLogits("load");
  ASSERT_TRUE(theirs.defined());
  EXPECT_LE((ours - theirs).abs().max().item<double>(), 1e-4);
}

TEST_F(Interop, TorchvisionWeightsGiveTheSameLogitsInKiln) {
  torch::Tensor theirs = PythonLogits("make");
  ASSERT_TRUE(theirs.defined());
  auto state = ReadSafetensors(dir_.path() + "/weights.safetensors");
  ASSERT_TRUE(state.ok()) << state.status();
  auto model = Resnet18();
  ASSERT_TRUE(LoadModelState(*state, *model, "weights.safetensors").ok());
  EXPECT_EQ(state->size(), StateDict(*model).size());  // nothing left over on either side
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_LE((model->forward(input_) - theirs).abs().max().item<double>(), 1e-4);
}

TEST(Safetensors, MalformedFileIsRefusedWithItsName) {
  testing::TempDir dir;
  dir.Write("bad.safetensors", std::string("\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ", 24));
  auto read = ReadSafetensors(dir.path() + "/bad.safetensors");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(
      std::string(read.status().message()).find("bad.safetensors: not a valid safetensors file"),
      std::string::npos);
}

}  // namespace interop_test
}  // namespace kiln
