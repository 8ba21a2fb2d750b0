// The pre-LayerNorm Transformer block that the text models share (GPT-2's layout and nanoGPT's
// parameter names: ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj), with causal and
// key-padding masks, and the masks themselves. Token id 0 is padding in every text model.
#pragma once

#include <torch/torch.h>

#include <type_traits>

#include "absl/status/status.h"
#include "components/models/autocast_linear.h"
#include "components/models/generation.h"
#include "components/models/lora_embedding.h"
#include "lib/distributed/sharding_units.h"
#include "lib/registry/options.h"

namespace kiln {

// The keys each query may attend to: those at or before it when `causal`, and those where the
// additive `bias` ([B, 1, 1, T] padding, or [T, T]) is not -inf; every key when neither is set.
struct AttentionMask {
  bool causal = false;
  torch::Tensor bias;
};

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t dim, int64_t heads, double dropout);
  // x [B, T, D] -> [B, T, D]. A causal mask alone runs as one fused kernel on CPU float32
  // (components/models/causal_attention.h) unless attention dropout is active.
  torch::Tensor forward(const torch::Tensor& x, const AttentionMask& mask);
  // Generation: x [B, t, D] after the cache's positions, attending as `mask` (the cache's) says;
  // this layer's keys and values go into the cache at `layer`.
  torch::Tensor forward_cached(const torch::Tensor& x, KvCache& cache, size_t layer,
                               const KvCache::Mask& mask);

  AutocastLinear c_attn{nullptr}, c_proj{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
TORCH_MODULE(SelfAttention);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t dim, int64_t heads, int64_t mlp_dim, double dropout);
  torch::Tensor forward(torch::Tensor x, const AttentionMask& mask);
  torch::Tensor forward_cached(torch::Tensor x, KvCache& cache, size_t layer,
                               const KvCache::Mask& mask);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention attn{nullptr};
  torch::nn::Sequential mlp{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(TransformerBlock);

// Token and learned position embeddings, blocks, a final LayerNorm (nanoGPT's `transformer`:
// wte, wpe, h.N, ln_f). forward(tokens [B, T], mask) -> hidden states [B, T, dim].
struct TextTransformerOptions {
  int64_t vocab_size = 0, positions = 256, dim = 256, depth = 4, heads = 4, mlp_dim = 1024;
  double dropout = 0.0;
};

class TextTransformerImpl : public torch::nn::Module, public distributed::ShardingUnits {
 public:
  explicit TextTransformerImpl(const TextTransformerOptions& o);
  // trainer.strategy=fsdp shards it block by block.
  std::vector<std::shared_ptr<torch::nn::Module>> sharding_units() const override;
  // `positions` [B, T] each token's position (packed rows); undefined: 0..T-1.
  torch::Tensor forward(const torch::Tensor& tokens, const AttentionMask& mask,
                        const torch::Tensor& positions = {});
  // Generation (causal): tokens [B, t] at `positions` [B, t], after the cache's positions.
  torch::Tensor forward_cached(const torch::Tensor& tokens, const torch::Tensor& positions,
                               KvCache& cache);

  LoraEmbedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  // Each block's activations recomputed in the backward (components/models/checkpointing.h).
  bool activation_checkpointing = false;

 private:
  TextTransformerOptions o_;
  std::vector<TransformerBlock> blocks_;
};
TORCH_MODULE(TextTransformer);

// [T, T]: 0 on and below the diagonal, -inf above (a position sees itself and the past).
torch::Tensor CausalBias(int64_t length, const torch::TensorOptions& options);
// Self-attention through ATen's at::scaled_dot_product_attention, which picks a fused kernel (flash
// attention on a GPU for causal masks without padding, memory-efficient attention otherwise):
// qkv [B, T, 3 * D] as c_attn makes it, heads of D / heads, `dropout` on the attention weights.
// Returns [B, T, D]. SelfAttention takes it on a GPU.
torch::Tensor FusedAttention(const torch::Tensor& qkv, int64_t heads, const AttentionMask& mask,
                             double dropout);
// [B, 1, 1, T]: -inf at padding keys (token id 0), 0 elsewhere.
torch::Tensor PaddingBias(const torch::Tensor& tokens, const torch::TensorOptions& options);
// GPT-2's initialization: N(0, 0.02) weights, zero biases, unit LayerNorms; the residual output
// projections (c_proj) scaled by 1/sqrt(2 * depth).
void InitTransformerWeights(torch::nn::Module& module, int64_t depth);

// Declares vocab_size, dim, depth, heads, mlp_dim and dropout on S, which derives from
// TextTransformerOptions (its values in S() are the defaults); the model binds `positions` to an
// option of its own (block_size, max_length).
template <typename S>
OptionBinding<S> AddTextTransformerOptions(OptionBinding<S> binding) {
  static_assert(std::is_base_of_v<TextTransformerOptions, S>);
  using T = TextTransformerOptions;
  return binding
      .Required("vocab_size", static_cast<int64_t S::*>(&T::vocab_size),
                "token ids are below it (the tokenizer's vocab_size)", AtLeast(1))
      .Field("dim", static_cast<int64_t S::*>(&T::dim), "embedding width", AtLeast(1))
      .Field("depth", static_cast<int64_t S::*>(&T::depth), "Transformer blocks", AtLeast(1))
      .Field("heads", static_cast<int64_t S::*>(&T::heads),
             "attention heads (dim must divide by it)", AtLeast(1))
      .Field("mlp_dim", static_cast<int64_t S::*>(&T::mlp_dim), "hidden width of each block's MLP",
             AtLeast(1))
      .Field("dropout", static_cast<double S::*>(&T::dropout),
             "dropout on embeddings, attention weights and residual branches",
             InHalfOpenRange(0, 1));
}
// What the declaration cannot check alone: dim divisible by heads.
absl::Status CheckTextTransformerOptions(const TextTransformerOptions& o,
                                         const OptionContext& context);

}  // namespace kiln
