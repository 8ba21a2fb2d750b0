#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "components/models/model.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace models_test {

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

// The CNN pools before its ReLU (a quarter of the ReLU work): outputs and every gradient are
// bitwise those of the textbook conv -> BN -> ReLU -> pool order, computed here from its own
// layers, in float32 and in bf16.
TEST(Cnn, PoolThenReluIsBitwiseReluThenPool) {
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(5);
    auto built =
        Build("_target_: cnn\nchannels: [8, 16]\ninput_size: 16\nhidden: 32\nnum_classes: 5\n");
    ASSERT_TRUE(built.ok()) << built.status();
    Model& model = **built;
    model.to(dtype);
    torch::Tensor x = torch::randn({6, 1, 16, 16}).to(dtype);
    auto textbook = [&](torch::Tensor h) {
      auto children = model.named_children();
      for (const char* i : {"1", "2"}) {
        h = children[std::string("conv") + i]->as<torch::nn::Conv2d>()->forward(h);
        h = children[std::string("bn") + i]->as<torch::nn::BatchNorm2d>()->forward(h);
        h = torch::max_pool2d(torch::relu(h), {2, 2}, {2, 2}, {0, 0});
      }
      h = torch::relu(children["fc1"]->as<torch::nn::Linear>()->forward(h.flatten(1)));
      return children["fc2"]->as<torch::nn::Linear>()->forward(h);
    };
    auto run = [&](const std::function<torch::Tensor(torch::Tensor)>& forward) {
      model.zero_grad();
      torch::Tensor out = forward(x);
      out.pow(2).sum().backward();
      std::vector<torch::Tensor> all{out.detach()};
      for (const auto& p : model.parameters()) all.push_back(p.grad().clone());
      return all;
    };
    std::vector<torch::Tensor> a = run([&](torch::Tensor h) { return model.forward(h); }),
                               b = run(textbook);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
  }
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

TEST(Vit, ShapesTorchvisionNamesAndParameterCount) {
  auto model = Build(
      "_target_: vit\nimage_size: 16\npatch_size: 4\nin_channels: 3\ndim: 32\ndepth: 2\nheads: 4\n"
      "mlp_dim: 64\nnum_classes: 10\n");
  ASSERT_TRUE(model.ok()) << model.status();
  torch::Tensor out = (*model)->forward(torch::randn({5, 3, 16, 16}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{5, 10}));
  auto params = (*model)->named_parameters();
  for (const char* name :
       {"conv_proj.weight", "class_token", "encoder.pos_embedding",
        "encoder.layers.encoder_layer_1.self_attention.in_proj_weight",
        "encoder.layers.encoder_layer_1.self_attention.out_proj.weight",
        "encoder.layers.encoder_layer_0.ln_1.weight", "encoder.layers.encoder_layer_0.mlp.0.weight",
        "encoder.layers.encoder_layer_0.mlp.3.bias", "encoder.ln.bias", "heads.head.weight"}) {
    EXPECT_TRUE(params.contains(name)) << name;
  }
  EXPECT_EQ(params["encoder.pos_embedding"].sizes(),
            (std::vector<int64_t>{1, 17, 32}));  // 16 patches + class
  // patch conv 3*16*32+32, class token 32, positions 17*32; per block: 2 LayerNorms 4*32,
  // attention 3*32*32+3*32 + 32*32+32, MLP 32*64+64 + 64*32+32; final LayerNorm 64; head 32*10+10.
  int64_t block = 4 * 32 + (3 * 32 * 32 + 3 * 32 + 32 * 32 + 32) + (32 * 64 + 64 + 64 * 32 + 32);
  EXPECT_EQ(ParameterCount(**model),
            3 * 16 * 32 + 32 + 32 + 17 * 32 + 2 * block + 64 + 32 * 10 + 10);
}

TEST(Vit, TrainsAFewStepsOnAFixedBatch) {
  torch::manual_seed(0);
  auto model = Build(
      "_target_: vit\nimage_size: 8\npatch_size: 4\nin_channels: 1\ndim: 16\ndepth: 1\nheads: 2\n"
      "mlp_dim: 32\nnum_classes: 2\n");
  ASSERT_TRUE(model.ok()) << model.status();
  // Two classes told apart by brightness.
  torch::Tensor labels = torch::arange(16) % 2;
  torch::Tensor images =
      torch::rand({16, 1, 8, 8}) * 0.5 + labels.view({-1, 1, 1, 1}).to(torch::kFloat32) * 0.5;
  torch::optim::AdamW optimizer((*model)->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy((*model)->forward(images), labels);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(2.0), 1e-6);  // the zero head starts from uniform predictions
  EXPECT_LT(last, 0.2);
  EXPECT_TRUE((*model)->forward(images).argmax(1).equal(labels));
}

TEST(Vit, BadShapesAreNamed) {
  auto heads = Build("_target_: vit\ndim: 30\nheads: 4\nnum_classes: 2\n");
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(std::string(heads.status().message())
                .find("option 'model.heads' of model 'vit' must be a divisor of dim (30)"),
            std::string::npos);
  auto patch = Build("_target_: vit\nimage_size: 30\npatch_size: 4\nnum_classes: 2\n");
  ASSERT_FALSE(patch.ok());
  EXPECT_NE(
      std::string(patch.status().message())
          .find("option 'model.patch_size' of model 'vit' must be a divisor of image_size (30)"),
      std::string::npos);
  auto model = Build(
      "_target_: vit\nimage_size: 8\ndim: 8\ndepth: 1\nheads: 2\nmlp_dim: 8\nnum_classes: 2\n");
  ASSERT_TRUE(model.ok());
  try {
    (*model)->forward(torch::randn({1, 3, 16, 16}));
    ADD_FAILURE() << "a 16x16 input to an 8x8 vit must be refused";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("vit expects images [batch, 3, 8, 8]"),
              std::string::npos);
  }
}

}  // namespace models_test
}  // namespace kiln
