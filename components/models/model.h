// The base of every registered model: a torch::nn::Module mapping an input batch to outputs.
// Models are built by name from config (`model: {_target_: cnn, ...}`) through Registry<Model>.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// The ids a model shares with a tokenizer: how many token ids it reads (a text model's
// vocab_size) or emits per step (a CTC model's num_classes), and the option that sets that number,
// for messages. size 0: the model declares none, and nothing is checked.
struct TokenIds {
  int64_t size = 0;
  std::string option;
};

// How a text classifier over a pretrained tokenizer's ids wants its rows: the tokenizer's cls
// token first, its sep token last ([CLS] text [SEP] for BERT, <s> text </s> for RoBERTa), padded
// with `pad`, the id whose positions it masks.
struct TextFraming {
  bool cls = false, sep = false;
  int64_t pad = 0;
};

class Model : public torch::nn::Module {
 public:
  static constexpr const char* kKind = "model";
  virtual torch::Tensor forward(torch::Tensor input) = 0;

  // What tasks need to know of a model, declared by the model instead of read from its options.
  virtual TokenIds token_ids() const { return {}; }
  // The longest sequence the model takes (learned positions); 0: any length.
  virtual int64_t max_positions() const { return 0; }
  // The framing its input rows need; none: the data module's own.
  virtual std::optional<TextFraming> text_framing() const { return std::nullopt; }
  // The classes its head was made for, by name (a pretrained classifier's id2label); empty: any
  // number, set by the task's options.
  virtual std::vector<std::string> class_names() const { return {}; }
  // The data's names for those classes, in class order (what an export writes as id2label).
  virtual void set_class_names(const std::vector<std::string>& /*names*/) {}
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
