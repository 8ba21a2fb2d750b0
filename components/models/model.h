// The base of every registered model: a torch::nn::Module mapping an input batch to outputs.
// Models are built by name from config (`model: {_target_: cnn, ...}`) through Registry<Model>.
#pragma once

#include <torch/torch.h>

namespace kiln {

class Model : public torch::nn::Module {
 public:
  static constexpr const char* kKind = "model";
  virtual torch::Tensor forward(torch::Tensor input) = 0;
};

}  // namespace kiln
