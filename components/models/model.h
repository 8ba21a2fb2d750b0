// The base of every registered model: a torch::nn::Module mapping an input batch to outputs.
// Models are built by name from config (`model: {_target_: cnn, ...}`) through Registry<Model>.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace kiln {

class Model : public torch::nn::Module {
 public:
  static constexpr const char* kKind = "model";
  virtual torch::Tensor forward(torch::Tensor input) = 0;
};

// A model over padded sequences that needs their real lengths and may shorten them (a CTC
// acoustic model subsampling its frames): input [B, T, ...] with lengths int64 [B] -> outputs
// [B, T', ...] and the outputs' real lengths int64 [B]. forward() treats every sequence as full.
class SequenceModel : public Model {
 public:
  virtual std::pair<torch::Tensor, torch::Tensor> forward_padded(torch::Tensor input,
                                                                 torch::Tensor lengths) = 0;
  torch::Tensor forward(torch::Tensor input) override {
    return forward_padded(input, torch::full({input.size(0)}, input.size(1), torch::kInt64)).first;
  }
};

}  // namespace kiln
