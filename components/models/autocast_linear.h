// A torch::nn::Linear whose forward, under autocast (bf16-mixed, CPU or CUDA), is ATen's `linear`
// (what Python's nn.Linear calls): the bias is cast with the weight and added inside the bf16
// product (one addmm). LibTorch's C++ F::linear instead runs matmul then `output += bias`, which
// under autocast adds the float32 bias to the bf16 product with type promotion: the output is
// copied to float32 and back around the add, and the bias gradient comes back through two more
// casts. Outside autocast the forward is LibTorch's own, so float32 (and bf16-true) results are
// unchanged.
#pragma once

#include <torch/torch.h>

#include "lib/base/torch_compat.h"

namespace kiln {

class AutocastLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& input) {
    if (compat::AutocastEnabled()) return torch::linear(input, weight, bias);
    return torch::nn::LinearImpl::forward(input);
  }
};
TORCH_MODULE(AutocastLinear);

}  // namespace kiln
