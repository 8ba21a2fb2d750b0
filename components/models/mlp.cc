// A multilayer perceptron: flatten, then Linear -> activation -> dropout for each hidden width.
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class Mlp : public Model {
 public:
  Mlp(int64_t in_features, const std::vector<int64_t>& hidden, int64_t num_classes, double dropout,
      std::string activation)
      : dropout_(dropout), activation_(std::move(activation)) {
    // A ModuleList names parameters like PyTorch does: layers.0.weight, layers.1.bias, ...
    layers_ = register_module("layers", torch::nn::ModuleList());
    int64_t width = in_features;
    for (int64_t h : hidden) {
      layers_->push_back(torch::nn::Linear(width, h));
      width = h;
    }
    head_ = register_module("head", torch::nn::Linear(width, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = x.flatten(1);
    for (size_t i = 0; i < layers_->size(); ++i) {
      x = layers_[i]->as<torch::nn::Linear>()->forward(x);
      x = activation_ == "gelu"   ? torch::gelu(x)
          : activation_ == "tanh" ? torch::tanh(x)
                                  : torch::relu(x);
      if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
    }
    return head_->forward(x);
  }

 private:
  torch::nn::ModuleList layers_{nullptr};
  torch::nn::Linear head_{nullptr};
  double dropout_;
  std::string activation_;
};

struct MlpOptions {
  int64_t in_features = 0;
  std::vector<int64_t> hidden = {256, 256};
  int64_t num_classes = 0;
  double dropout = 0.0;
  std::string activation = "relu";
};

KILN_REGISTER_BOUND(Model, "mlp", "Multilayer perceptron on flattened inputs",
                    OptionBinding<MlpOptions>()
                        .Required("in_features", &MlpOptions::in_features,
                                  "size of one flattened input")
                        .Field("hidden", &MlpOptions::hidden, "widths of the hidden layers")
                        .Required("num_classes", &MlpOptions::num_classes, "number of outputs")
                        .Field("dropout", &MlpOptions::dropout, "dropout after each hidden layer")
                        .Field("activation", &MlpOptions::activation, "relu, gelu or tanh",
                               OneOf({"relu", "gelu", "tanh"})),
                    [](const MlpOptions& o) -> absl::StatusOr<std::shared_ptr<Model>> {
                      return std::make_shared<Mlp>(o.in_features, o.hidden, o.num_classes,
                                                   o.dropout, o.activation);
                    });

}  // namespace
}  // namespace kiln
