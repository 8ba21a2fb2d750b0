// DS-CNN (Zhang et al. 2017, "Hello Edge: Keyword Spotting on Microcontrollers"): a keyword
// spotter over speech features [B, frames, F]. One full convolution (kernel 10x4 over time x
// frequency, stride 2), then depthwise-separable blocks (depthwise 3x3 -> BN -> ReLU -> pointwise
// 1x1 -> BN -> ReLU), global average pooling, dropout and a linear classifier.
#include "absl/strings/str_cat.h"
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class DsCnn : public Model {
 public:
  DsCnn(int64_t channels, int64_t blocks, std::vector<int64_t> kernel, std::vector<int64_t> stride,
        int64_t num_classes, double dropout)
      : dropout_(dropout) {
    conv_ = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, channels, kernel)
                                                          .stride(stride)
                                                          .padding({kernel[0] / 2, kernel[1] / 2})
                                                          .bias(false)));
    bn_ = register_module("bn", torch::nn::BatchNorm2d(channels));
    for (int64_t i = 0; i < blocks; ++i) {
      depthwise_.push_back(
          register_module(absl::StrCat("dw", i + 1),
                          torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, channels, 3)
                                                .padding(1)
                                                .groups(channels)
                                                .bias(false))));
      depthwise_bn_.push_back(
          register_module(absl::StrCat("dw_bn", i + 1), torch::nn::BatchNorm2d(channels)));
      pointwise_.push_back(register_module(
          absl::StrCat("pw", i + 1),
          torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, channels, 1).bias(false))));
      pointwise_bn_.push_back(
          register_module(absl::StrCat("pw_bn", i + 1), torch::nn::BatchNorm2d(channels)));
    }
    fc_ = register_module("fc", torch::nn::Linear(channels, num_classes));
  }

  // features [B, frames, F] -> logits [B, num_classes].
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(bn_->forward(conv_->forward(x.unsqueeze(1))));
    for (size_t i = 0; i < depthwise_.size(); ++i) {
      x = torch::relu(depthwise_bn_[i]->forward(depthwise_[i]->forward(x)));
      x = torch::relu(pointwise_bn_[i]->forward(pointwise_[i]->forward(x)));
    }
    x = x.mean({2, 3});
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
    return fc_->forward(x);
  }

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};
  std::vector<torch::nn::Conv2d> depthwise_, pointwise_;
  std::vector<torch::nn::BatchNorm2d> depthwise_bn_, pointwise_bn_;
  torch::nn::Linear fc_{nullptr};
  double dropout_;
};

struct DsCnnOptions {
  int64_t channels = 64;
  int64_t blocks = 4;
  std::pair<int64_t, int64_t> kernel = {10, 4};
  std::pair<int64_t, int64_t> stride = {2, 2};
  int64_t num_classes = 0;
  double dropout = 0.2;
};

KILN_REGISTER_BOUND(
    Model, "ds_cnn",
    "Depthwise-separable CNN keyword spotter (Hello Edge DS-CNN) over features [B, frames, F]",
    OptionBinding<DsCnnOptions>()
        .Field("channels", &DsCnnOptions::channels, "channels of every layer", AtLeast(1))
        .Field("blocks", &DsCnnOptions::blocks, "depthwise-separable blocks", AtLeast(0))
        .Field("kernel", &DsCnnOptions::kernel, "first convolution's kernel [time, frequency]",
               Each(AtLeast(1)))
        .Field("stride", &DsCnnOptions::stride, "first convolution's stride [time, frequency]",
               Each(AtLeast(1)))
        .Required("num_classes", &DsCnnOptions::num_classes, "number of outputs", AtLeast(2))
        .Field("dropout", &DsCnnOptions::dropout, "dropout before the classifier"),
    [](const DsCnnOptions& o) -> absl::StatusOr<std::shared_ptr<Model>> {
      return std::make_shared<DsCnn>(
          o.channels, o.blocks, std::vector<int64_t>{o.kernel.first, o.kernel.second},
          std::vector<int64_t>{o.stride.first, o.stride.second}, o.num_classes, o.dropout);
    });

}  // namespace
}  // namespace kiln
