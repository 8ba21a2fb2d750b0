// ResNet-18/34/50 with torchvision's layout and parameter names (conv1, bn1, layer1.0.conv1, ...,
// layer2.0.downsample.0, fc), so weights move between kiln and torchvision as they are.
#include "absl/strings/str_cat.h"
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

// BasicBlock (ResNet-18/34) and Bottleneck (ResNet-50), as torchvision builds them.
class Block : public nn::Module {
 public:
  Block(int64_t in, int64_t planes, int64_t stride, bool bottleneck) : bottleneck_(bottleneck) {
    int64_t out = planes * (bottleneck ? 4 : 1);
    if (bottleneck) {
      conv1_ = register_module("conv1", Conv(in, planes, 1, 1, 0));
      bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
      conv2_ = register_module("conv2", Conv(planes, planes, 3, stride, 1));
      bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
      conv3_ = register_module("conv3", Conv(planes, out, 1, 1, 0));
      bn3_ = register_module("bn3", nn::BatchNorm2d(out));
    } else {
      conv1_ = register_module("conv1", Conv(in, planes, 3, stride, 1));
      bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
      conv2_ = register_module("conv2", Conv(planes, planes, 3, 1, 1));
      bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
    }
    if (stride != 1 || in != out) {
      downsample_ = register_module(
          "downsample", nn::Sequential(Conv(in, out, 1, stride, 0), nn::BatchNorm2d(out)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
    torch::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    if (bottleneck_) y = bn3_->forward(conv3_->forward(torch::relu(y)));
    return torch::relu(y + identity);
  }

  // torchvision's zero_init_residual: the last norm of each block starts at zero.
  void ZeroInitLastNorm() { nn::init::zeros_((bottleneck_ ? bn3_ : bn2_)->weight); }

 private:
  bool bottleneck_;
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};

class ResNet : public Model {
 public:
  ResNet(int64_t depth, int64_t in_channels, int64_t num_classes, bool zero_init_residual) {
    const std::vector<int64_t> counts =
        depth == 18 ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};
    bool bottleneck = depth == 50;
    conv1_ = register_module("conv1", Conv(in_channels, 64, 7, 2, 3));
    bn1_ = register_module("bn1", nn::BatchNorm2d(64));
    int64_t in = 64;
    for (int64_t stage = 0; stage < 4; ++stage) {
      int64_t planes = 64 << stage;
      nn::Sequential layer;
      for (int64_t b = 0; b < counts[static_cast<size_t>(stage)]; ++b) {
        auto block = std::make_shared<Block>(in, planes, b == 0 && stage > 0 ? 2 : 1, bottleneck);
        in = planes * (bottleneck ? 4 : 1);
        blocks_.push_back(block);
        layer->push_back(block);
      }
      layers_.push_back(register_module(absl::StrCat("layer", stage + 1), layer));
    }
    fc_ = register_module("fc", nn::Linear(in, num_classes));
    // torchvision's initialization: Kaiming normal (fan_out) for convs, BatchNorm at 1 and 0.
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
        nn::init::ones_(bn->weight);
        nn::init::zeros_(bn->bias);
      }
    }
    if (zero_init_residual) {
      for (auto& block : blocks_) block->ZeroInitLastNorm();
    }
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(bn1_->forward(conv1_->forward(x))), {3, 3}, {2, 2}, {1, 1});
    for (auto& layer : layers_) {
      for (size_t i = 0; i < layer->size(); ++i) x = layer[i]->as<Block>()->forward(x);
    }
    return fc_->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }

 private:
  nn::Conv2d conv1_{nullptr};
  nn::BatchNorm2d bn1_{nullptr};
  std::vector<nn::Sequential> layers_;
  std::vector<std::shared_ptr<Block>> blocks_;
  nn::Linear fc_{nullptr};
};

struct ResNetOptions {
  int64_t depth = 18;
  int64_t in_channels = 3;
  int64_t num_classes = 0;
  bool zero_init_residual = false;
};

// The depths with a torchvision layout.
OptionCheck ResNetDepth() {
  return {"18, 34 or 50", [](const config::Node& n) {
            return n.kind() == config::NodeKind::kInt &&
                   (n.as_int() == 18 || n.as_int() == 34 || n.as_int() == 50);
          }};
}

using O = ResNetOptions;
KILN_REGISTER_BOUND(Model, "resnet",
                    "ResNet-18/34/50 with torchvision's layout and parameter names",
                    OptionBinding<O>()
                        .Field("depth", &O::depth, "18, 34 or 50", ResNetDepth())
                        .Field("in_channels", &O::in_channels, "channels of the input images")
                        .Required("num_classes", &O::num_classes, "number of outputs")
                        .Field("zero_init_residual", &O::zero_init_residual,
                               "start each block's last BatchNorm at zero"),
                    [](const O& o) -> absl::StatusOr<std::shared_ptr<Model>> {
                      return std::make_shared<ResNet>(o.depth, o.in_channels, o.num_classes,
                                                      o.zero_init_residual);
                    });

}  // namespace
}  // namespace kiln
