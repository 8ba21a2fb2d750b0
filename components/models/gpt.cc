// A GPT-style decoder language model (Radford et al. 2019; nanoGPT's layout and parameter names):
// token and learned position embeddings, pre-LayerNorm blocks with causal self-attention, a final
// LayerNorm, and an output layer tied to the token embedding. Input [B, T] ids -> [B, T, vocab].
#include "absl/strings/str_cat.h"
#include "components/models/model.h"
#include "components/models/text_transformer.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class Gpt : public Model {
 public:
  Gpt(const TextTransformerOptions& o, bool tie_weights)
      : tie_weights_(tie_weights), vocab_size_(o.vocab_size), positions_(o.positions) {
    transformer = register_module("transformer", TextTransformer(o));
    if (!tie_weights) {
      lm_head = register_module(
          "lm_head", torch::nn::Linear(torch::nn::LinearOptions(o.dim, o.vocab_size).bias(false)));
    }
    InitTransformerWeights(*this, o.depth);
  }

  torch::Tensor forward(torch::Tensor input) override {
    torch::Tensor x = transformer->forward(input, AttentionMask{/*causal=*/true, {}});
    // Tied: the logits reuse the embedding matrix (one parameter, not two names for one tensor).
    return tie_weights_ ? torch::linear(x, transformer->wte->weight) : lm_head->forward(x);
  }
  TokenIds token_ids() const override { return {vocab_size_, "vocab_size"}; }
  int64_t max_positions() const override { return positions_; }

  TextTransformer transformer{nullptr};
  torch::nn::Linear lm_head{nullptr};

 private:
  bool tie_weights_;
  int64_t vocab_size_, positions_;
};

struct GptOptions : TextTransformerOptions {
  GptOptions() : TextTransformerOptions{0, 256, 256, 4, 4, 1024, 0.0} {}
  bool tie_weights = true;
};

KILN_REGISTER_BOUND(
    Model, "gpt",
    "GPT decoder LM: learned positions, pre-LayerNorm causal self-attention, tied output layer",
    AddTextTransformerOptions(OptionBinding<GptOptions>().Field(
                                  "block_size",
                                  static_cast<int64_t GptOptions::*>(&GptOptions::positions),
                                  "longest context (learned positions)", AtLeast(1)))
        .Field("tie_weights", &GptOptions::tie_weights,
               "the output layer reuses the token embedding"),
    [](const GptOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_RETURN_IF_ERROR(CheckTextTransformerOptions(o, context));
      return std::make_shared<Gpt>(o, o.tie_weights);
    });

}  // namespace
}  // namespace kiln
