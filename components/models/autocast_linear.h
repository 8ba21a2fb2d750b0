// A torch::nn::Linear whose forward, under autocast (bf16-mixed, CPU or CUDA), is ATen's `linear`
// (what Python's nn.Linear calls): the bias is cast with the weight and added inside the bf16
// product (one addmm). LibTorch's C++ F::linear instead runs matmul then `output += bias`, which
// under autocast adds the float32 bias to the bf16 product with type promotion: the output is
// copied to float32 and back around the add, and the bias gradient comes back through two more
// casts. Outside autocast the forward is LibTorch's own, so float32 (and bf16-true) results are
// unchanged.
//
// It can carry a LoRA adapter (lib/trainer/lora.h): lora_A and lora_B beside the frozen weight, the
// output W x + b + s B A dropout(x) with s = alpha / r (alpha / sqrt(r) for rsLoRA), as PEFT's
// lora.Linear computes it (with lora_bias, lora_B's bias b_B too: + s b_B); with DoRA (use_dora),
// also the magnitudes m, as PEFT's DoraLinearLayer.
//
// A model's untied output head (token_head: llama's lm_head) can carry PEFT's trainable tokens
// instead: trainable_tokens_delta [k, in], the weight's rows of k token ids, starting as the
// base's, that replace them, so those tokens' logits are x . row. PEFT's TrainableTokensLayer
// computes x W'^T there, without the layer's bias: a head with a bias is not taken
// (lib/trainer/lora.cc).
#pragma once

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "lib/base/torch_compat.h"
#include "lib/trainer/lora.h"

namespace kiln {

class AutocastLinearImpl : public torch::nn::LinearImpl, public LoraLayerSettings {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& input) {
    if (tokens_.defined()) return ForwardTokens(input);
    if (lora_dora_) return ForwardDora(input);
    if (CanFold(input)) return ForwardFoldingLora(input, /*with_bias=*/true);
    torch::Tensor y = BaseForward(input, /*with_bias=*/true);
    if (!lora_A) return y;
    torch::Tensor x =
        lora_dropout_ > 0 ? torch::dropout(input, lora_dropout_, is_training()) : input;
    return y + lora_B->forward(lora_A->forward(x)) * lora_scaling_;
  }

  // W x, plus b where `with_bias`, in the base's precision: ATen's linear under autocast; a frozen
  // base held in bf16 (model.lora.base_dtype) computes in it and returns the input's dtype.
  torch::Tensor BaseForward(const torch::Tensor& input, bool with_bias) {
    const torch::Tensor& b = with_bias ? bias : torch::Tensor();
    if (compat::AutocastEnabled()) return torch::linear(input, weight, b);
    if (weight.scalar_type() != input.scalar_type())
      return torch::linear(input.to(weight.scalar_type()), weight, b).to(input.scalar_type());
    return with_bias ? torch::nn::LinearImpl::forward(input) : torch::linear(input, weight);
  }

  // The base's outputs with the trained tokens' replaced: x . row for each, written into the
  // columns in place (the base's product keeps its inputs for the backward, not its result).
  torch::Tensor ForwardTokens(const torch::Tensor& input) {
    torch::Tensor y = BaseForward(input, /*with_bias=*/false);
    torch::Tensor rows = torch::linear(
        input, compat::AutocastEnabled() ? tokens_.delta : tokens_.delta.to(input.scalar_type()));
    return y.index_copy_(-1, tokens_.index(y.device()), rows.to(y.scalar_type()));
  }

  // DoRA as PEFT's DoraLinearLayer computes it: with s B A the adapter's product and
  // n = |W + s B A| over each output row, held constant (no gradient), the output is
  // W x + b + (m / n - 1) W x' + (m / n) s B A x' with x' = dropout(x); without dropout (or in
  // evaluation) that is (m / n)(W x + s B A x) + b, computed so (the sum folded as LoRA's is).
  torch::Tensor ForwardDora(const torch::Tensor& input) {
    torch::Tensor scale = lora_magnitude_vector / DoraWeightNorm();
    auto adapter = [&](const torch::Tensor& x) {
      return lora_B->forward(lora_A->forward(x)) * lora_scaling_;
    };
    torch::Tensor y;
    if (lora_dropout_ > 0 && is_training()) {
      torch::Tensor x = torch::dropout(input, lora_dropout_, /*train=*/true);
      y = BaseForward(input, /*with_bias=*/true) +
          (scale - 1) * BaseForward(x, /*with_bias=*/false) + scale * adapter(x);
    } else {
      torch::Tensor sum = CanFold(input) ? ForwardFoldingLora(input, /*with_bias=*/false)
                                         : BaseForward(input, /*with_bias=*/false) + adapter(input);
      y = bias.defined() ? torch::addcmul(bias, sum, scale) : sum * scale;
    }
    return y;
  }

  // Whether ForwardFoldingLora applies: outside autocast and tracing, with the adapters in the
  // activations' dtype.
  bool CanFold(const torch::Tensor& input) const {
    return lora_A && !compat::AutocastEnabled() && !torch::jit::tracer::isTracing() &&
           input.dim() >= 1 && lora_A->weight.scalar_type() == input.scalar_type() &&
           lora_B->weight.scalar_type() == input.scalar_type();
  }

  // W + s B A in the adapters' precision (also under autocast), without gradient.
  torch::Tensor AdaptedWeight() const {
    torch::NoGradGuard no_grad;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKeySet({c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}));
    const torch::Tensor& a = lora_A->weight;
    return weight.to(a.scalar_type()).addmm(lora_B->weight, a, /*beta=*/1, /*alpha=*/lora_scaling_);
  }

  // |W + s B A| over each output row, held constant (DoRA's n).
  torch::Tensor DoraWeightNorm() const {
    return torch::linalg_vector_norm(AdaptedWeight(), 2, {1});
  }

  // Outside autocast and tracing (the rows' shape would be recorded as a constant, so a traced
  // module would take one batch size only), with the adapters in the activations' dtype: W x (+ b
  // where `with_bias`) on
  // the rows as one [rows, out] product, then the adapter's s B (A x) added into it by
  // one more product (addmm_, beta 1) instead of a product, a scaling and a sum over [rows, out]
  // each way. The in-place update is safe for autograd: the base's product keeps its inputs, not
  // its result.
  torch::Tensor ForwardFoldingLora(const torch::Tensor& input, bool with_bias) {
    const int64_t in = weight.size(1), out = weight.size(0);
    torch::Tensor rows = input.reshape({-1, in});
    const torch::Tensor& b = with_bias ? bias : torch::Tensor();
    torch::Tensor y =
        weight.scalar_type() == input.scalar_type()
            ? torch::linear(rows, weight, b)
            : torch::linear(rows.to(weight.scalar_type()), weight, b).to(input.scalar_type());
    torch::Tensor x = lora_dropout_ > 0 ? torch::dropout(rows, lora_dropout_, is_training()) : rows;
    y.addmm_(torch::mm(x, lora_A->weight.t()), lora_B->weight.t(), /*beta=*/1,
             /*alpha=*/lora_scaling_);
    if (lora_B->bias.defined()) y.add_(lora_B->bias, lora_scaling_);
    std::vector<int64_t> sizes = input.sizes().vec();
    sizes.back() = out;
    return y.view(sizes);
  }

  void AddLora(const LoraOptions& o) override {
    KeepLoraSettings(o);
    const auto& sizes = options;
    // lora_A: nn.Linear's own initialization (Kaiming uniform), as PEFT's default; lora_B: zeros.
    lora_A = register_module(
        "lora_A",
        torch::nn::Linear(torch::nn::LinearOptions(sizes.in_features(), o.r).bias(false)));
    lora_B = register_module(
        "lora_B",
        torch::nn::Linear(torch::nn::LinearOptions(o.r, sizes.out_features()).bias(o.lora_bias)));
    torch::NoGradGuard no_grad;
    lora_B->weight.zero_();
    if (o.lora_bias) lora_B->bias.zero_();
    lora_A->to(weight.device(), weight.scalar_type());
    lora_B->to(weight.device(), weight.scalar_type());
    lora_dora_ = o.use_dora;
    if (lora_dora_) {
      lora_magnitude_vector = register_parameter("lora_magnitude_vector", DoraWeightNorm());
    }
  }
  bool has_lora() const override { return static_cast<bool>(lora_A); }
  torch::Tensor MergedWeight() const override {
    if (tokens_.defined()) return tokens_.Replaced(weight);
    if (!lora_A) return weight;
    if (!lora_dora_) return weight + torch::matmul(lora_B->weight, lora_A->weight) * lora_scaling_;
    torch::NoGradGuard no_grad;
    torch::Tensor merged = AdaptedWeight();
    return merged *
           (lora_magnitude_vector / torch::linalg_vector_norm(merged, 2, {1})).unsqueeze(1);
  }
  // b + s b_B (PEFT's lora_bias), or b.
  torch::Tensor MergedBias() const {
    if (!lora_A || !lora_B->bias.defined()) return bias;
    return bias + lora_B->bias.to(bias.scalar_type()) * lora_scaling_;
  }
  void MergeLora() override {
    torch::NoGradGuard no_grad;
    if (tokens_.defined()) {
      tokens_.Merge(weight);
      parameters_.erase("trainable_tokens_delta");
    }
    if (!lora_A) return;
    if (lora_B->bias.defined()) bias.copy_(MergedBias());
    // A bf16 base (model.lora.base_dtype) merges into float32, the adapters' precision.
    torch::Tensor merged = MergedWeight();
    if (merged.scalar_type() != weight.scalar_type()) {
      weight.set_data(merged);
    } else {
      weight.copy_(merged);
    }
    unregister_module("lora_A");
    unregister_module("lora_B");
    lora_A = nullptr;
    lora_B = nullptr;
    if (lora_dora_) {
      parameters_.erase("lora_magnitude_vector");
      lora_magnitude_vector = torch::Tensor();
      lora_dora_ = false;
    }
  }
  void ResetDoraMagnitude() override {
    if (!lora_dora_) return;
    torch::NoGradGuard no_grad;
    lora_magnitude_vector.copy_(DoraWeightNorm());
  }
  bool lora_dora() const override { return lora_dora_; }
  bool lora_has_bias() const override { return lora_A && lora_B->bias.defined(); }

  bool can_train_tokens() const override { return token_head; }
  const std::vector<int64_t>& trainable_tokens() const override { return tokens_.ids(); }
  void AddTrainableTokens(const std::vector<int64_t>& ids) override {
    tokens_.Add(*this, weight, ids);
  }
  void ResetTrainableTokens() override { tokens_.Reset(weight); }
  // PEFT's trainable_tokens_delta, or undefined.
  const torch::Tensor& trainable_tokens_delta() const { return tokens_.delta; }
  // The trained rows' indices move with the weight (as LoraEmbedding's).
  using torch::nn::LinearImpl::to;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override {
    torch::nn::LinearImpl::to(device, dtype, non_blocking);
    tokens_.MoveTo(device);
  }
  void to(torch::Device device, bool non_blocking = false) override {
    torch::nn::LinearImpl::to(device, non_blocking);
    tokens_.MoveTo(device);
  }

  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};
  torch::Tensor lora_magnitude_vector;  // DoRA's m, one per output (PEFT's name)
  // Set by a model for its untied output head.
  bool token_head = false;

 private:
  bool lora_dora_ = false;
  TrainableTokenRows tokens_;
};
TORCH_MODULE(AutocastLinear);

// The outputs of several linear layers that read the same input, side by side, from one matrix
// product: their weights (LoRA merged in) and biases concatenated once and kept until one of them
// changes (a load, an optimizer step, a cast), which their data pointers and version counters
// tell. For generation, where each token's products are small and their call overhead is much of
// the step. Layers whose weights together exceed `max_elements` are not fused (a product that
// large is dominated by its arithmetic, and the copy would cost their memory again): Forward then
// returns an undefined tensor and the caller runs the layers one by one.
class FusedLinears {
 public:
  torch::Tensor Forward(const std::vector<AutocastLinearImpl*>& layers, const torch::Tensor& x,
                        int64_t max_elements) {
    std::vector<std::pair<const void*, uint32_t>> key;
    int64_t elements = 0;
    for (const AutocastLinearImpl* layer : layers) {
      // A base held in another dtype than the activations: the layers' own forward casts.
      if (layer->weight.scalar_type() != x.scalar_type() && !compat::AutocastEnabled()) return {};
      elements += layer->weight.numel();
      for (const torch::Tensor* t : {&layer->weight, &layer->bias}) {
        if (t->defined()) key.emplace_back(t->data_ptr(), t->_version());
      }
      if (layer->lora_A) {
        for (const torch::nn::Linear& lora : {layer->lora_A, layer->lora_B})
          key.emplace_back(lora->weight.data_ptr(), lora->weight._version());
        const torch::Tensor& b = layer->lora_B->bias;
        if (b.defined()) key.emplace_back(b.data_ptr(), b._version());
      }
      const torch::Tensor& m = layer->lora_magnitude_vector;
      if (m.defined()) key.emplace_back(m.data_ptr(), m._version());
    }
    if (elements > max_elements) return {};
    if (key != key_ || !weight_.defined()) {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> weights, biases;
      bool any_bias = false;
      for (const AutocastLinearImpl* layer : layers) {
        weights.push_back(layer->MergedWeight());
        any_bias = any_bias || layer->bias.defined();
        biases.push_back(layer->bias.defined()
                             ? layer->MergedBias()
                             : torch::zeros({layer->weight.size(0)}, layer->weight.options()));
      }
      weight_ = torch::cat(weights, 0);
      bias_ = any_bias ? torch::cat(biases, 0) : torch::Tensor();
      key_ = std::move(key);
    }
    return torch::linear(x, weight_, bias_);
  }

 private:
  std::vector<std::pair<const void*, uint32_t>> key_;
  torch::Tensor weight_, bias_;
};

}  // namespace kiln
