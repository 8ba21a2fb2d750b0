// The base of every registered model: a torch::nn::Module mapping an input batch to outputs.
// Models are built by name from config (`model: {_target_: cnn, ...}`) through Registry<Model>.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>

namespace kiln {

// The ids a model shares with a tokenizer: how many token ids it reads (a text model's
// vocab_size) or emits per step (a CTC model's num_classes), and the option that sets that number,
// for messages. size 0: the model declares none, and nothing is checked.
struct TokenIds {
  int64_t size = 0;
  std::string option;
};

class Model : public torch::nn::Module {
 public:
  static constexpr const char* kKind = "model";
  virtual torch::Tensor forward(torch::Tensor input) = 0;

  // What tasks need to know of a model, declared by the model instead of read from its options.
  virtual TokenIds token_ids() const { return {}; }
  // The longest sequence the model takes (learned positions); 0: any length.
  virtual int64_t max_positions() const { return 0; }
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
