#include <gtest/gtest.h>
#include <torch/torch.h>

#include "components/models/model.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

absl::StatusOr<std::shared_ptr<Model>> Build(const std::string& yaml) {
  auto node = config::ParseYaml(yaml, "model.yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  return Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
}

int64_t ParameterCount(Model& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(Cnn, ShapesAndParameterCount) {
  auto model = Build("_target_: cnn\nnum_classes: 10\n");
  ASSERT_TRUE(model.ok()) << model.status();
  torch::Tensor out = (*model)->forward(torch::randn({4, 1, 28, 28}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 10}));
  // conv1 1*32*9 + bn1 2*32, conv2 32*64*9 + bn2 2*64, fc1 64*7*7*128+128, fc2 128*10+10
  EXPECT_EQ(ParameterCount(**model), 288 + 64 + 18432 + 128 + 401408 + 128 + 1280 + 10);
  auto names = (*model)->named_parameters().keys();
  EXPECT_EQ(names.front(), "conv1.weight");
  EXPECT_EQ(names.back(), "fc2.bias");
}

TEST(Mlp, ShapesAndParameterCount) {
  auto model = Build("_target_: mlp\nin_features: 784\nhidden: [32]\nnum_classes: 10\n");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->forward(torch::randn({3, 1, 28, 28})).sizes(), (std::vector<int64_t>{3, 10}));
  EXPECT_EQ(ParameterCount(**model), 784 * 32 + 32 + 32 * 10 + 10);
}

TEST(Mlp, BadActivationNamesKeyAndLine) {
  auto model = Build("_target_: mlp\nin_features: 4\nnum_classes: 2\nactivation: sigmoidd\n");
  ASSERT_FALSE(model.ok());
  std::string m(model.status().message());
  EXPECT_NE(m.find("model.activation"), std::string::npos) << m;
  EXPECT_NE(m.find("model.yaml:4"), std::string::npos) << m;
}

TEST(Cnn, InputTooSmallForPoolingIsRefused) {
  auto model = Build("_target_: cnn\nnum_classes: 2\ninput_size: 2\nchannels: [8, 8, 8]\n");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(std::string(model.status().message()).find("model.input_size"), std::string::npos);
}

}  // namespace
}  // namespace kiln
