// A multilayer perceptron: flatten, then Linear -> activation -> dropout for each hidden width.
#include "absl/strings/str_cat.h"
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
      x = activation_ == "gelu" ? torch::gelu(x) : activation_ == "tanh" ? torch::tanh(x) : torch::relu(x);
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

KILN_REGISTER(Model, "mlp", "Multilayer perceptron on flattened inputs",
              OptionSchema()
                  .Required("in_features", OptionType::kInt, "size of one flattened input")
                  .Add("hidden", OptionType::kList, "[256, 256]", "widths of the hidden layers")
                  .Required("num_classes", OptionType::kInt, "number of outputs")
                  .Float("dropout", 0.0, "dropout after each hidden layer")
                  .String("activation", "relu", "relu, gelu or tanh"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Model>> {
                KILN_ASSIGN_OR_RETURN(int64_t in, cfg.Get<int64_t>("in_features"));
                KILN_ASSIGN_OR_RETURN(auto hidden, cfg.Get<std::vector<int64_t>>("hidden"));
                KILN_ASSIGN_OR_RETURN(int64_t classes, cfg.Get<int64_t>("num_classes"));
                KILN_ASSIGN_OR_RETURN(double dropout, cfg.Get<double>("dropout"));
                KILN_ASSIGN_OR_RETURN(std::string activation, cfg.Get<std::string>("activation"));
                if (activation != "relu" && activation != "gelu" && activation != "tanh") {
                  return absl::InvalidArgumentError(absl::StrCat(
                      "option '", cfg.FullKey("activation"), "' must be relu, gelu or tanh, got '",
                      activation, "' (set at ", cfg.WhereSet("activation"), ")"));
                }
                return std::make_shared<Mlp>(in, hidden, classes, dropout, activation);
              });

}  // namespace
}  // namespace kiln
