// Text generation from decoder language models with a key/value cache: each step feeds the model
// only the newest token, whose attention reads the keys and values of every earlier token from
// the cache instead of recomputing them. Prompts of different lengths go in one batch, padded on
// the left (as Hugging Face's generate does), each token at its own sequence's position.
//
// Sampling follows transformers' logits processors, in their order: repetition penalty, then
// temperature, top-k and top-p; temperature 0 is greedy (the most likely token). A row stops at
// an end-of-sequence id, when `stop` says so (stop strings, checked by the caller who can decode),
// or after max_new_tokens.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "components/models/model.h"

namespace kiln {

// The keys and values of every token a model has seen, layer by layer, and which of those
// positions are tokens rather than left padding.
class KvCache {
 public:
  // Room for `capacity` positions in total, reserved at the first Append (0: grow by copying).
  explicit KvCache(int64_t capacity = 0) : capacity_(capacity) {}

  // Marks `real` [B, t] (false: left padding) as the next t positions; call before the model's
  // forward_cached, which appends those positions' keys and values.
  void Extend(const torch::Tensor& real);
  // Layer `layer`'s keys and values [B, heads, t, head_dim] of the newest t positions; returns
  // the layer's keys and values of every position so far, [B, heads, length(), head_dim].
  std::pair<torch::Tensor, torch::Tensor> Append(size_t layer, const torch::Tensor& k,
                                                 const torch::Tensor& v);
  // Positions so far (after Extend), and the newest call's count.
  int64_t length() const { return length_; }
  int64_t added() const { return added_; }
  // [B, length()] bool.
  const torch::Tensor& real() const { return real_; }
  // What the new queries may attend to: each sees the real keys at or before it (itself always,
  // so that a padding query has one key), and with `window` > 0 only the last `window` positions.
  // Without padding or a window that matters, no mask (every key for one new query, causal for a
  // cache's first positions); else the additive mask [B, 1, added(), length()] in `dtype`.
  struct Mask {
    std::optional<torch::Tensor> bias;
    bool causal = false;
  };
  Mask AttentionMask(torch::ScalarType dtype, int64_t window = 0) const;

 private:
  int64_t capacity_ = 0, length_ = 0, added_ = 0;
  bool padded_ = false;  // some position is left padding
  torch::Tensor real_;
  std::vector<torch::Tensor> keys_, values_;  // [B, heads, capacity or length, head_dim]
};

// A decoder language model that can continue from a cache.
class CausalLm : public Model {
 public:
  // ids [B, t] at positions [B, t] (each token's index in its own sequence), after the tokens in
  // `cache` (whose Extend has marked these t): logits [B, t, vocab]. Appends the new keys and
  // values to the cache. In eval mode, under NoGradGuard.
  virtual torch::Tensor forward_cached(const torch::Tensor& ids, const torch::Tensor& positions,
                                       KvCache& cache) = 0;
  // Whether positions past max_positions() have no embedding (learned positions): generation then
  // starts the cache again from the last tokens that fit. Rotary models extrapolate instead.
  virtual bool learned_positions() const { return false; }
  // Packed rows (data.packing: several examples one after another in a row): ids [B, T] and
  // segments int64 [B, T], the example of its row each position belongs to (an example's positions
  // consecutive). Each position attends only to its own example's positions up to itself, and
  // positions count from each example's start, so every example's logits are those it has alone.
  // Undefined: the model does not take packed rows.
  virtual torch::Tensor forward_packed(const torch::Tensor& /*ids*/,
                                       const torch::Tensor& /*segments*/) {
    return {};
  }
};

// What a packed row's segments [B, T] mean to a model: each position's index within its own
// example [B, T], and which keys each query may attend to, bool [B, 1, T, T] (those of its own
// example at or before it).
struct PackedRows {
  torch::Tensor positions, allowed;
};
PackedRows Unpack(const torch::Tensor& segments);

// A model without a cache (an LSTM language model) seen as a CausalLm: each call runs the model
// over every token so far again (as many as the cache has, left padding included) and returns the
// newest positions' logits.
class RecomputingLm : public CausalLm {
 public:
  explicit RecomputingLm(std::shared_ptr<Model> model) : model_(std::move(model)) {}
  torch::Tensor forward(torch::Tensor input) override { return model_->forward(input); }
  torch::Tensor forward_cached(const torch::Tensor& ids, const torch::Tensor& positions,
                               KvCache& cache) override;
  TokenIds token_ids() const override { return model_->token_ids(); }
  int64_t max_positions() const override { return model_->max_positions(); }

 private:
  std::shared_ptr<Model> model_;
  torch::Tensor history_;  // [B, cache.length()]
};

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // 1: every token
  double repetition_penalty = 1.0;
  std::vector<int64_t> eos_token_ids;  // a row ends at any of these (not included)
  std::vector<int64_t> never;          // ids never produced (padding, specials)
  uint64_t seed = 0;
  int64_t pad_token_id = 0;  // what fills the left padding
  // The longest context the model sees (0: the model's positions if they are learned, else no
  // limit): a row that outgrows it starts the cache again from its last 3/4 of it.
  int64_t context = 0;
};

// Called after each new token of a row with the row's generated ids so far: true ends the row
// (a stop string; the ids are kept as they are).
using StopCheck = std::function<bool(size_t row, const std::vector<int64_t>& generated)>;

// The ids generated after each prompt (each non-empty), in prompt order.
std::vector<std::vector<int64_t>> Generate(CausalLm& model,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const SamplingOptions& options,
                                           const StopCheck& stop = {});

// The next-token scores after transformers' processors (repetition penalty over the ids each
// row has seen, `seen` [B, T] (a row's ids may repeat; undefined: none), then temperature, top-k
// and top-p), as float32 [B, vocab]; -inf where a token cannot be drawn.
torch::Tensor ProcessLogits(torch::Tensor logits, const torch::Tensor& seen,
                            const SamplingOptions& options);

}  // namespace kiln
