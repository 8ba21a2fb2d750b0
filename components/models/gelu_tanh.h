// GELU with the tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//
// On CPUs with AVX2 and FMA, float32 and bfloat16 CPU tensors take one fused kernel (bfloat16 is
// computed in float32 and rounded once at the end, as ATen's bf16 kernels do) that keeps the
// derivative it computed from its tanh, so the backward is one product that reads the gradient and
// the derivative only (ATen's gelu_backward evaluates tanh again, and tanh is most of GELU's
// cost). The tanh comes from one exp (a Cephes polynomial), to about 1e-7
// absolute. Everything else goes to torch::gelu(x, "tanh"). The kernel's backward is not
// itself differentiable (no second derivatives).
#pragma once

#include <torch/torch.h>

namespace kiln {

torch::Tensor GeluTanh(const torch::Tensor& x);

// SwiGLU's gate, silu(gate) * up (Llama's MLP), for gate and up of one shape and dtype. In
// training (autograd recording either input) float32 and bfloat16 CPU tensors take one fused kernel
// each way, on AVX2 and FMA: the forward reads gate and up once and writes the product (ATen: silu,
// then the product, two passes and a tensor between), the backward writes both gradients in one
// pass (ATen: silu_backward and two products). The sigmoid comes from the same exp as GeluTanh's,
// to about 1e-7 relative. Otherwise (evaluation, generation, other devices) torch::silu(gate) * up.
torch::Tensor SiluMul(const torch::Tensor& gate, const torch::Tensor& up);

// A transformer block's residual add, x + y, where x is the float32 residual stream and y a
// branch's output in bf16 (autocast's products): on CPUs with AVX2 and FMA, one pass that widens y
// as it adds (ATen's promoted add first copies y to float32), the same bits as x + y both ways
// (x's gradient passed through, y's rounded to bf16). Otherwise, and for any other dtypes, x + y.
torch::Tensor ResidualAdd(const torch::Tensor& x, const torch::Tensor& y);

// The same as a module, for Sequential.
class GeluTanhLayerImpl : public torch::nn::Module {
 public:
  torch::Tensor forward(const torch::Tensor& x) { return GeluTanh(x); }
};
TORCH_MODULE(GeluTanhLayer);

}  // namespace kiln
