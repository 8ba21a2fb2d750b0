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

KILN_REGISTER(
    Model, "ds_cnn",
    "Depthwise-separable CNN keyword spotter (Hello Edge DS-CNN) over features [B, frames, F]",
    OptionSchema()
        .Int("channels", 64, "channels of every layer")
        .Int("blocks", 4, "depthwise-separable blocks")
        .Add("kernel", OptionType::kList, "[10, 4]", "first convolution's kernel [time, frequency]")
        .Add("stride", OptionType::kList, "[2, 2]", "first convolution's stride [time, frequency]")
        .Required("num_classes", OptionType::kInt, "number of outputs")
        .Float("dropout", 0.2, "dropout before the classifier"),
    [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_ASSIGN_OR_RETURN(int64_t channels, cfg.Get<int64_t>("channels"));
      KILN_ASSIGN_OR_RETURN(int64_t blocks, cfg.Get<int64_t>("blocks"));
      KILN_ASSIGN_OR_RETURN(auto kernel, cfg.Get<std::vector<int64_t>>("kernel"));
      KILN_ASSIGN_OR_RETURN(auto stride, cfg.Get<std::vector<int64_t>>("stride"));
      KILN_ASSIGN_OR_RETURN(int64_t classes, cfg.Get<int64_t>("num_classes"));
      KILN_ASSIGN_OR_RETURN(double dropout, cfg.Get<double>("dropout"));
      for (const char* key : {"kernel", "stride"}) {
        const auto& v = std::string(key) == "kernel" ? kernel : stride;
        if (v.size() != 2 || v[0] < 1 || v[1] < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("option '", cfg.FullKey(key),
                           "' must be two positive integers [time, frequency] (set at ",
                           cfg.WhereSet(key), ")"));
        }
      }
      if (channels < 1 || blocks < 0 || classes < 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", cfg.prefix(), "': needs channels >= 1, blocks >= 0, num_classes >= 2"));
      }
      return std::make_shared<DsCnn>(channels, blocks, kernel, stride, classes, dropout);
    });

}  // namespace
}  // namespace kiln
