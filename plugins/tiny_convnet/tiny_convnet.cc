// A kiln plugin that adds a model: `model=tiny_convnet` (configs/model/tiny_convnet.yaml).
// Two 3x3 convolutions with ReLU and max-pooling, global average pooling, one linear layer.
#include "absl/strings/str_cat.h"
#include <kiln/core.h>
#include <kiln/models.h>
#include <kiln/plugin.h>

namespace {

class TinyConvNet : public kiln::Model {
 public:
  TinyConvNet(int64_t in_channels, int64_t width, int64_t num_classes) {
    conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, width, 3).padding(1)));
    conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(width, 2 * width, 3).padding(1)));
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

absl::StatusOr<std::shared_ptr<kiln::Model>> Build(const kiln::config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(int64_t in_channels, cfg.Get<int64_t>("in_channels"));
  KILN_ASSIGN_OR_RETURN(int64_t width, cfg.Get<int64_t>("width"));
  KILN_ASSIGN_OR_RETURN(int64_t num_classes, cfg.Get<int64_t>("num_classes"));
  if (width < 1) {
    return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("width"), "' must be at least 1 (set at ",
                                                   cfg.WhereSet("width"), ")"));
  }
  return std::make_shared<TinyConvNet>(in_channels, width, num_classes);
}

void Register(kiln::Registrar& registrar) {
  registrar.Add<kiln::Model>("tiny_convnet", "Two conv layers, global average pooling, a linear head (plugin example)",
                             kiln::OptionSchema()
                                 .Int("in_channels", 1, "channels of the input images")
                                 .Int("width", 16, "channels of the first convolution (the second has twice as many)")
                                 .Required("num_classes", kiln::OptionType::kInt, "number of outputs"),
                             Build);
}

}  // namespace

KILN_PLUGIN("tiny_convnet", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
