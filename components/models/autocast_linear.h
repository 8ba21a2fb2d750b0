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
// lora.Linear computes it.
#pragma once

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "lib/base/torch_compat.h"
#include "lib/trainer/lora.h"

namespace kiln {

class AutocastLinearImpl : public torch::nn::LinearImpl, public LoraLayer {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& input) {
    if (lora_A && !compat::AutocastEnabled() && !torch::jit::tracer::isTracing() &&
        input.dim() >= 1 && lora_A->weight.scalar_type() == input.scalar_type() &&
        lora_B->weight.scalar_type() == input.scalar_type()) {
      return ForwardFoldingLora(input);
    }
    torch::Tensor y;
    if (compat::AutocastEnabled()) {
      y = torch::linear(input, weight, bias);
    } else if (weight.scalar_type() != input.scalar_type()) {
      // A frozen base held in bf16 (model.lora.base_dtype): computed in it, returned in the
      // input's.
      y = torch::linear(input.to(weight.scalar_type()), weight, bias).to(input.scalar_type());
    } else {
      y = torch::nn::LinearImpl::forward(input);
    }
    if (!lora_A) return y;
    torch::Tensor x =
        lora_dropout_ > 0 ? torch::dropout(input, lora_dropout_, is_training()) : input;
    return y + lora_B->forward(lora_A->forward(x)) * lora_scaling_;
  }

  // Outside autocast and tracing (the rows' shape would be recorded as a constant, so a traced
  // module would take one batch size only), with the adapters in the activations' dtype: W x + b on
  // the rows as one [rows, out] product, then the adapter's s B (A x) added into it by
  // one more product (addmm_, beta 1) instead of a product, a scaling and a sum over [rows, out]
  // each way. The in-place update is safe for autograd: the base's product keeps its inputs, not
  // its result.
  torch::Tensor ForwardFoldingLora(const torch::Tensor& input) {
    const int64_t in = weight.size(1), out = weight.size(0);
    torch::Tensor rows = input.reshape({-1, in});
    torch::Tensor y =
        weight.scalar_type() == input.scalar_type()
            ? torch::linear(rows, weight, bias)
            : torch::linear(rows.to(weight.scalar_type()), weight, bias).to(input.scalar_type());
    torch::Tensor x = lora_dropout_ > 0 ? torch::dropout(rows, lora_dropout_, is_training()) : rows;
    y.addmm_(torch::mm(x, lora_A->weight.t()), lora_B->weight.t(), /*beta=*/1,
             /*alpha=*/lora_scaling_);
    std::vector<int64_t> sizes = input.sizes().vec();
    sizes.back() = out;
    return y.view(sizes);
  }

  void AddLora(int64_t r, double alpha, double dropout, bool rslora) override {
    lora_r_ = r;
    lora_alpha_ = alpha;
    lora_dropout_ = dropout;
    lora_rslora_ = rslora;
    lora_scaling_ = LoraScaling(r, alpha, rslora);
    const auto& o = options;
    // lora_A: nn.Linear's own initialization (Kaiming uniform), as PEFT's default; lora_B: zeros.
    lora_A = register_module(
        "lora_A", torch::nn::Linear(torch::nn::LinearOptions(o.in_features(), r).bias(false)));
    lora_B = register_module(
        "lora_B", torch::nn::Linear(torch::nn::LinearOptions(r, o.out_features()).bias(false)));
    torch::NoGradGuard no_grad;
    lora_B->weight.zero_();
    lora_A->to(weight.device(), weight.scalar_type());
    lora_B->to(weight.device(), weight.scalar_type());
  }
  bool has_lora() const override { return static_cast<bool>(lora_A); }
  torch::Tensor MergedWeight() const override {
    if (!lora_A) return weight;
    return weight + torch::matmul(lora_B->weight, lora_A->weight) * lora_scaling_;
  }
  void MergeLora() override {
    if (!lora_A) return;
    torch::NoGradGuard no_grad;
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
  }
  int64_t lora_r() const override { return lora_r_; }
  double lora_alpha() const override { return lora_alpha_; }
  double lora_dropout() const override { return lora_dropout_; }
  bool lora_rslora() const override { return lora_rslora_; }

  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};

 private:
  int64_t lora_r_ = 0;
  double lora_alpha_ = 0, lora_dropout_ = 0, lora_scaling_ = 0;
  bool lora_rslora_ = false;
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
      }
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
                             ? layer->bias
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
