// A Transformer encoder text classifier (BERT-shaped, small): the shared text Transformer with
// padding-masked self-attention, then the first position (the <cls> token the data module
// prepends) or the mean of the real tokens, and a linear head. Input [B, T] ids (0 = padding).
#include "components/models/model.h"
#include "components/models/text_transformer.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class TransformerClassifier : public Model {
 public:
  TransformerClassifier(const TextTransformerOptions& o, int64_t num_classes, bool cls_pool)
      : vocab_size_(o.vocab_size),
        max_length_(o.positions),
        dropout_(o.dropout),
        cls_pool_(cls_pool) {
    transformer = register_module("transformer", TextTransformer(o));
    head = register_module("head", torch::nn::Linear(o.dim, num_classes));
    InitTransformerWeights(*this, o.depth);
  }

  torch::Tensor forward(torch::Tensor input) override {
    // Longer inputs are cut to the positions the model has.
    if (input.size(1) > max_length_) input = input.narrow(1, 0, max_length_);
    torch::Tensor x = transformer->forward(
        input,
        AttentionMask{false, PaddingBias(input, torch::TensorOptions().device(input.device()))});
    torch::Tensor pooled;
    if (cls_pool_) {
      pooled = x.select(1, 0);
    } else {
      torch::Tensor mask = input.ne(0).unsqueeze(-1).to(x.dtype());
      pooled = (x * mask).sum(1) / mask.sum(1).clamp_min(1.0);
    }
    if (dropout_ > 0) pooled = torch::dropout(pooled, dropout_, is_training());
    return head->forward(pooled);
  }
  TokenIds token_ids() const override { return {vocab_size_, "vocab_size"}; }

  TextTransformer transformer{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  int64_t vocab_size_, max_length_;
  double dropout_;
  bool cls_pool_;
};

struct TransformerClassifierOptions : TextTransformerOptions {
  TransformerClassifierOptions() : TextTransformerOptions{0, 512, 128, 2, 4, 512, 0.1} {}
  int64_t num_classes = 0;
  std::string pool = "cls";
};

KILN_REGISTER_BOUND(
    Model, "transformer_classifier",
    "Transformer encoder text classifier: padding-masked pre-LayerNorm blocks, <cls> or mean "
    "pooling",
    AddTextTransformerOptions(OptionBinding<TransformerClassifierOptions>()
                                  .Required("num_classes",
                                            &TransformerClassifierOptions::num_classes,
                                            "number of classes", AtLeast(2))
                                  .Field("max_length",
                                         static_cast<int64_t TransformerClassifierOptions::*>(
                                             &TransformerClassifierOptions::positions),
                                         "positions (longer inputs are cut)", AtLeast(1))
                                  .Field("pool", &TransformerClassifierOptions::pool,
                                         "cls (the first token) or mean (of the real tokens)",
                                         OneOf({"cls", "mean"}))),
    [](const TransformerClassifierOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_RETURN_IF_ERROR(CheckTextTransformerOptions(o, context));
      return std::make_shared<TransformerClassifier>(o, o.num_classes, o.pool == "cls");
    });

}  // namespace
}  // namespace kiln
