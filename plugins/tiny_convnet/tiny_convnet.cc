// A kiln plugin that adds a model: `model=tiny_convnet` (configs/model/tiny_convnet.yaml).
// Two 3x3 convolutions with ReLU and max-pooling, global average pooling, one linear layer.
#include <kiln/models.h>
#include <kiln/plugin.h>
#include <kiln/registry.h>

namespace {

class TinyConvNet : public kiln::Model {
 public:
  TinyConvNet(int64_t in_channels, int64_t width, int64_t num_classes) {
    conv1_ = register_module(
        "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, width, 3).padding(1)));
    conv2_ = register_module(
        "conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(width, 2 * width, 3).padding(1)));
    head_ = register_module("head", torch::nn::Linear(2 * width, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);
    return head_->forward(x.mean({2, 3}));
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// Each option is declared once, as a field of this struct: its name, default (the field's initial
// value), doc and check. kiln validates the config against it and hands the filled struct over.
struct TinyConvNetOptions {
  int64_t in_channels = 1;
  int64_t width = 16;
  int64_t num_classes = 0;
};

void Register(kiln::Registrar& registrar) {
  using O = TinyConvNetOptions;
  registrar.Add<kiln::Model>(
      "tiny_convnet", "Two conv layers, global average pooling, a linear head (plugin example)",
      kiln::OptionBinding<O>()
          .Field("in_channels", &O::in_channels, "channels of the input images", kiln::AtLeast(1))
          .Field("width", &O::width,
                 "channels of the first convolution (the second has twice as many)",
                 kiln::AtLeast(1))
          .Required("num_classes", &O::num_classes, "number of outputs", kiln::AtLeast(1)),
      [](const O& o) -> absl::StatusOr<std::shared_ptr<kiln::Model>> {
        return std::make_shared<TinyConvNet>(o.in_channels, o.width, o.num_classes);
      });
}

}  // namespace

KILN_PLUGIN("tiny_convnet", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
