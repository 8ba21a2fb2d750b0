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
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "lib/trainer/lora.h"

namespace kiln {

class LoraEmbeddingImpl : public torch::nn::EmbeddingImpl, public LoraLayerSettings {
 public:
  using torch::nn::EmbeddingImpl::EmbeddingImpl;
  torch::Tensor forward(const torch::Tensor& ids) {
    torch::Tensor y = torch::nn::EmbeddingImpl::forward(ids);
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
    if (!has_lora()) return weight;
    return weight + torch::matmul(lora_embedding_B, lora_embedding_A).t() * lora_scaling_;
  }
  void MergeLora() override {
    if (!has_lora()) return;
    torch::NoGradGuard no_grad;
    if (untie_head) {
      untie_head(weight.detach().clone());
      untie_head = nullptr;
    }
    weight.copy_(MergedWeight());
    parameters_.erase("lora_embedding_A");
    parameters_.erase("lora_embedding_B");
    lora_embedding_A = lora_embedding_B = torch::Tensor();
  }
  bool lora_dora() const override { return false; }
  bool lora_has_bias() const override { return false; }
  void ResetDoraMagnitude() override {}

  torch::Tensor lora_embedding_A, lora_embedding_B;  // PEFT's names
  // Set by a model whose output head reads `weight`: gives the head the table it is passed as a
  // weight of its own (see the top of this file).
  std::function<void(const torch::Tensor&)> untie_head;
};
TORCH_MODULE(LoraEmbedding);

}  // namespace kiln
