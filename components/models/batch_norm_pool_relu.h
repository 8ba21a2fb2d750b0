// relu(max_pool2d(batch_norm(x), 2x2, stride 2)), the non-convolution part of the `cnn` model's
// blocks, with BatchNorm2d's running-statistics update.
//
// bf16 activations with float32 BatchNorm parameters (bf16-mixed training), channels-last, in
// training mode, on CPUs with AVX-512 BF16 (those where bf16 pays), take one fused kernel: the
// forward reads the convolution's output twice (per-channel statistics, then normalize + pool +
// ReLU) and writes only the quarter-size output, one byte per output value (which of the four
// inputs won, or none after the ReLU) and the winner's input value (for the backward's sums); the
// backward is one reduction over the quarter-size gradient and one pass writing the input's
// gradient. Statistics, normalization and gradients are computed in float32 and rounded once to
// bf16. Everything else (float32, eval mode, bf16 BatchNorm parameters, NCHW, odd sizes, channels
// not a multiple of 8, other CPUs, TorchScript tracing) runs ATen's composition, bitwise as before.
#pragma once

#include <torch/torch.h>

namespace kiln {

// `bn` is updated as BatchNorm2d::forward would (num_batches_tracked, running mean and unbiased
// variance with its momentum, or the cumulative average without one).
torch::Tensor BatchNormPoolRelu(const torch::Tensor& x, torch::nn::BatchNorm2d& bn);

// Whether BatchNormPoolRelu takes the fused kernel for this input and layer.
bool BatchNormPoolReluIsFused(const torch::Tensor& x, const torch::nn::BatchNorm2d& bn);

}  // namespace kiln
