// A small CNN for 28x28-style images: for each width, conv 3x3 -> BatchNorm -> ReLU -> max-pool 2
// (computed as BatchNorm -> max-pool -> ReLU, fused in bf16: batch_norm_pool_relu.h),
// then FC `hidden` -> ReLU -> dropout -> FC num_classes.
#include "absl/strings/str_cat.h"
#include "components/models/batch_norm_pool_relu.h"
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class Cnn : public Model {
 public:
  Cnn(int64_t in_channels, const std::vector<int64_t>& channels, int64_t input_size, int64_t hidden,
      int64_t num_classes, double dropout)
      : dropout_(dropout) {
    int64_t c = in_channels, size = input_size;
    for (size_t i = 0; i < channels.size(); ++i) {
      convs_.push_back(register_module(
          absl::StrCat("conv", i + 1),
          torch::nn::Conv2d(torch::nn::Conv2dOptions(c, channels[i], 3).padding(1).bias(false))));
      norms_.push_back(
          register_module(absl::StrCat("bn", i + 1), torch::nn::BatchNorm2d(channels[i])));
      c = channels[i];
      size /= 2;
    }
    fc1_ = register_module("fc1", torch::nn::Linear(c * size * size, hidden));
    fc2_ = register_module("fc2", torch::nn::Linear(hidden, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    for (size_t i = 0; i < convs_.size(); ++i) {
      x = BatchNormPoolRelu(convs_[i]->forward(x), norms_[i]);
    }
    x = torch::relu(fc1_->forward(x.flatten(1)));
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
    return fc2_->forward(x);
  }

 private:
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::BatchNorm2d> norms_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
  double dropout_;
};

struct CnnOptions {
  int64_t in_channels = 1;
  std::vector<int64_t> channels = {32, 64};
  int64_t input_size = 28;
  int64_t hidden = 128;
  int64_t num_classes = 0;
  double dropout = 0.0;
};

KILN_REGISTER_BOUND(
    Model, "cnn", "Small CNN: conv-BN-ReLU-pool blocks, then two fully connected layers",
    OptionBinding<CnnOptions>()
        .Field("in_channels", &CnnOptions::in_channels, "channels of the input images")
        .Field("channels", &CnnOptions::channels, "output channels of each conv block")
        .Field("input_size", &CnnOptions::input_size,
               "height and width of the (square) input images")
        .Field("hidden", &CnnOptions::hidden, "width of the first fully connected layer")
        .Required("num_classes", &CnnOptions::num_classes, "number of outputs")
        .Field("dropout", &CnnOptions::dropout, "dropout before the last layer"),
    [](const CnnOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      // Each block halves the side; at least one pixel must be left.
      if (o.input_size >> o.channels.size() < 1) {
        return context.Refuse("input_size",
                              absl::StrCat("at least ", int64_t{1} << o.channels.size(), " for ",
                                           o.channels.size(), " pooling blocks"));
      }
      return std::make_shared<Cnn>(o.in_channels, o.channels, o.input_size, o.hidden, o.num_classes,
                                   o.dropout);
    });

}  // namespace
}  // namespace kiln
