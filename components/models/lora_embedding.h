// A torch::nn::Embedding that can carry a LoRA adapter (lib/trainer/lora.h) as PEFT's
// lora.Embedding does: beside the frozen table W [num, dim], lora_embedding_A [r, num] and
// lora_embedding_B [dim, r], a token's vector W[id] + s (A^T[id] B^T), s = alpha / r (alpha /
// sqrt(r) for rsLoRA). As PEFT: A starts at zeros and B from a standard normal (the reverse of a
// Linear layer's), no dropout is applied (lora_dropout is kept for the adapter's file), and the
// merged table is W + s (B A)^T. DoRA and lora_bias are not taken (PEFT refuses lora_bias on
// embeddings too).
//
// A model whose output head reads this table (a tied head: llama's tie_word_embeddings, GPT-2)
// sets untie_head: the head keeps reading the base table, as in PEFT without ensure_weight_tying,
// so merging the adapter into the shared table would change the head too. MergeLora first hands
// the model the base table for a head of its own (which an export then writes untied), and then
// merges. (PEFT's merge_and_unload changes the head silently.)
//
// A model's token table (is_token_table: llama's embed_tokens, GPT-2's wte, BERT's
// word_embeddings) can carry PEFT's trainable tokens instead: trainable_tokens_delta [k, dim], the
// rows of k token ids, starting as the base's rows, that replace them (PEFT's TrainableTokensLayer:
// its "delta" is the rows themselves). The forward gathers the base's row or the trained one for
// each position, without a copy of the table; a tied head reads table(), the table with the rows
// replaced, as PEFT ties the head to them. Merging writes the rows into the table.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "lib/trainer/lora.h"

namespace kiln {

class LoraEmbeddingImpl : public torch::nn::EmbeddingImpl, public LoraLayerSettings {
 public:
  using torch::nn::EmbeddingImpl::EmbeddingImpl;
  torch::Tensor forward(const torch::Tensor& ids) {
    torch::Tensor y = torch::nn::EmbeddingImpl::forward(ids);
    if (tokens_.defined()) {
      // Each position's slot among the trained rows (-1: the base's row); the padding id's slot,
      // if it trains, gets no gradient, as the table's padding row.
      torch::Tensor slot = token_slot_.to(ids.device()).index({ids});  // ids' shape, traced too
      torch::Tensor rows = torch::embedding(tokens_.delta, slot.clamp_min(0), padding_slot_);
      y = torch::where(slot.ge(0).unsqueeze(-1), rows.to(y.scalar_type()), y);
    }
    if (!lora_embedding_A.defined()) return y;
    // PEFT's order: embedding(ids, A^T) @ B^T, then the scaling, then the sum.
    const std::optional<int64_t> pad = options.padding_idx();
    torch::Tensor a = torch::embedding(lora_embedding_A.t(), ids, pad.value_or(-1));
    return y + torch::matmul(a, lora_embedding_B.t()) * lora_scaling_;
  }

  void AddLora(const LoraOptions& o) override {
    KeepLoraSettings(o);
    torch::NoGradGuard no_grad;
    const auto like = weight.options().dtype(torch::kFloat32);
    lora_embedding_A =
        register_parameter("lora_embedding_A", torch::zeros({o.r, weight.size(0)}, like));
    lora_embedding_B =
        register_parameter("lora_embedding_B", torch::randn({weight.size(1), o.r}, like));
  }
  bool has_lora() const override { return lora_embedding_A.defined(); }
  torch::Tensor MergedWeight() const override {
    if (!has_lora()) return table();
    return table() + torch::matmul(lora_embedding_B, lora_embedding_A).t() * lora_scaling_;
  }
  void MergeLora() override {
    torch::NoGradGuard no_grad;
    if (has_lora() && untie_head) {
      untie_head(weight.detach().clone());
      untie_head = nullptr;
    }
    if (has_lora()) weight.copy_(MergedWeight());
    tokens_.Merge(weight);
    for (const char* name : {"lora_embedding_A", "lora_embedding_B", "trainable_tokens_delta"}) {
      if (parameters_.contains(name)) parameters_.erase(name);
    }
    lora_embedding_A = lora_embedding_B = torch::Tensor();
  }
  bool lora_dora() const override { return false; }
  bool lora_has_bias() const override { return false; }
  void ResetDoraMagnitude() override {}

  bool is_token_table() const override { return token_table; }
  const std::vector<int64_t>& trainable_tokens() const override { return tokens_.ids(); }
  void AddTrainableTokens(const std::vector<int64_t>& ids) override {
    tokens_.Add(*this, weight, ids);
    torch::NoGradGuard no_grad;
    const auto index_options = weight.options().dtype(torch::kInt64);
    token_slot_ = torch::full({weight.size(0)}, -1, index_options);
    token_slot_.index_put_({tokens_.index(weight.device())},
                           torch::arange(static_cast<int64_t>(ids.size()), index_options));
    const std::optional<int64_t> pad = options.padding_idx();
    padding_slot_ = pad.has_value() ? token_slot_[*pad].item<int64_t>() : -1;
  }
  void ResetTrainableTokens() override { tokens_.Reset(weight); }
  // The trained rows' indices move with the table (module.to(cuda) after AddLora), so that a
  // forward does not copy them there each time.
  using torch::nn::EmbeddingImpl::to;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override {
    torch::nn::EmbeddingImpl::to(device, dtype, non_blocking);
    MoveTokenIndices(device);
  }
  void to(torch::Device device, bool non_blocking = false) override {
    torch::nn::EmbeddingImpl::to(device, non_blocking);
    MoveTokenIndices(device);
  }
  // The table with the trained rows in place: what a tied head reads.
  torch::Tensor table() const { return tokens_.Replaced(weight); }
  // PEFT's trainable_tokens_delta, or undefined.
  const torch::Tensor& trainable_tokens_delta() const { return tokens_.delta; }

  torch::Tensor lora_embedding_A, lora_embedding_B;  // PEFT's names
  // Set by a model for its token table (the one PEFT's get_input_embeddings returns).
  bool token_table = false;
  // Set by a model whose output head reads `weight`: gives the head the table it is passed as a
  // weight of its own (see the top of this file).
  std::function<void(const torch::Tensor&)> untie_head;

 private:
  TrainableTokenRows tokens_;
  void MoveTokenIndices(const torch::Device& device) {
    tokens_.MoveTo(device);
    if (token_slot_.defined()) token_slot_ = token_slot_.to(device);
  }
  // For each id of the table its row among the trained ones, or -1 (on the table's device).
  torch::Tensor token_slot_;
  int64_t padding_slot_ = -1;
};
TORCH_MODULE(LoraEmbedding);

}  // namespace kiln
