// A small CNN for 28x28-style images: for each width, conv 3x3 -> BatchNorm -> ReLU -> max-pool 2,
// then FC `hidden` -> ReLU -> dropout -> FC num_classes.
#include "absl/strings/str_cat.h"
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
          absl::StrCat("conv", i + 1), torch::nn::Conv2d(torch::nn::Conv2dOptions(c, channels[i], 3).padding(1).bias(false))));
      norms_.push_back(register_module(absl::StrCat("bn", i + 1), torch::nn::BatchNorm2d(channels[i])));
      c = channels[i];
      size /= 2;
    }
    fc1_ = register_module("fc1", torch::nn::Linear(c * size * size, hidden));
    fc2_ = register_module("fc2", torch::nn::Linear(hidden, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    for (size_t i = 0; i < convs_.size(); ++i) {
      x = torch::max_pool2d(torch::relu(norms_[i]->forward(convs_[i]->forward(x))), 2);
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

KILN_REGISTER(Model, "cnn", "Small CNN: conv-BN-ReLU-pool blocks, then two fully connected layers",
              OptionSchema()
                  .Int("in_channels", 1, "channels of the input images")
                  .Add("channels", OptionType::kList, "[32, 64]", "output channels of each conv block")
                  .Int("input_size", 28, "height and width of the (square) input images")
                  .Int("hidden", 128, "width of the first fully connected layer")
                  .Required("num_classes", OptionType::kInt, "number of outputs")
                  .Float("dropout", 0.0, "dropout before the last layer"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Model>> {
                KILN_ASSIGN_OR_RETURN(int64_t in, cfg.Get<int64_t>("in_channels"));
                KILN_ASSIGN_OR_RETURN(auto channels, cfg.Get<std::vector<int64_t>>("channels"));
                KILN_ASSIGN_OR_RETURN(int64_t size, cfg.Get<int64_t>("input_size"));
                KILN_ASSIGN_OR_RETURN(int64_t hidden, cfg.Get<int64_t>("hidden"));
                KILN_ASSIGN_OR_RETURN(int64_t classes, cfg.Get<int64_t>("num_classes"));
                KILN_ASSIGN_OR_RETURN(double dropout, cfg.Get<double>("dropout"));
                if (size >> channels.size() < 1) {
                  return absl::InvalidArgumentError(absl::StrCat(
                      "option '", cfg.FullKey("input_size"), "' = ", size, " is too small for ",
                      channels.size(), " pooling blocks (set at ", cfg.WhereSet("input_size"), ")"));
                }
                return std::make_shared<Cnn>(in, channels, size, hidden, classes, dropout);
              });

}  // namespace
}  // namespace kiln
