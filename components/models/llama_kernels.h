// The Llama family's RMSNorm and rotary embedding as CPU loops, each one pass over its rows where
// ATen runs five to eight elementwise kernels (and as many again in the backward), with a tensor
// written and read between each two. Other devices, dtypes and layouts take the ATen composite,
// which is also the definition the loops follow.
#pragma once

#include <torch/torch.h>

namespace kiln {

// Hugging Face's LlamaRMSNorm over the last dimension: weight * (x * rsqrt(mean(x^2) + eps)),
// computed in float32 and the normalized row cast back to x's dtype before the weight's product.
// - Without autograd, float32 or bf16 contiguous CPU rows with a weight of their dtype: one loop
//   with the same roundings (a generation step's norms are small enough that the kernels' calls
//   cost more than their work). The sum of squares is added in another order than ATen's mean, so
//   results can differ from the composite's in the last bit.
// - With autograd, float32 contiguous CPU rows and a float32 weight: one loop each way, in
//   parallel over rows. The backward writes dx and the weight's gradient in one pass (the
//   gradient's partial sums are over fixed blocks of rows, added in a fixed order, so it does not
//   depend on the thread count); it is not itself differentiable.
torch::Tensor RmsNormalize(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// LayerNorm over the last dimension with its weight and bias, the result rounded to bf16: what a
// LayerNorm under CPU autocast (which runs it in float32) followed by the bf16 product that reads
// it computes, in one loop over float32 rows and without the float32 result and its cast. The
// mean and variance are summed in a fixed order of their own, so values can differ from ATen's
// layer_norm in the last bit before the rounding. With autograd, the backward is one loop too
// (dx, and the weight's and bias's gradients over fixed blocks of rows). Other inputs (a bf16
// weight, say): torch::layer_norm in float32, then the cast, as autocast runs it.
torch::Tensor LayerNormToBf16(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps);

// Rotary position embedding in the "rotate half" form Hugging Face's checkpoints are laid out
// for: x * cos + RotateHalf(x) * sin, where RotateHalf swaps the last dimension's halves and
// negates the second. x [B, T, n, hd] (any strides but a contiguous last dimension); cos and sin
// [T, hd] or [B, T, 1, hd]. Returns [B, T, n, hd] (contiguous from the loops below).
// - float32 or bf16 CPU tensors of one dtype: one loop over (B, T) rows, each product rounded to
//   the dtype and then their sum, as the composite's kernels round, so the forward equals it bit
//   for bit. With autograd (float32 only) the backward, dy * cos + RotateHalf^T(dy * sin), is one
//   loop too; cos and sin get no gradient (they come from positions).
// - bf16 x with float32 cos and sin (a projection under autocast, the model's tables): the same
//   loop with the composite's float32 result, equal to it bit for bit, with autograd or without;
//   the backward computes dx in float32 and rounds it to bf16 once (the composite rounds its two
//   terms to bf16 and adds them in bf16).
torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Attention's input from the projections in one pass: q [B, T, heads hd], k and v [B, T, kv_heads
// hd] -> [B, T, (heads + 2 kv_heads) hd], q's and k's heads rotated by cos and sin [T, hd] (as
// Rotate), then v's, in v's dtype: what cat({Rotate(q).to(v's dtype), Rotate(k).to(..), v}) gives,
// bit for bit, without the rotated tensors and the copy into the concatenation. One loop each way
// for contiguous CPU float32 q, k and v, or bf16 ones (autocast) with float32 cos and sin; the
// backward is Rotate's, rounded once to q's dtype, and hands v the gradient's v heads. Other
// inputs take that composite.
torch::Tensor RotateQkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                        int64_t kv_heads);

// The composite's RotateHalf: [.., hd] with the halves swapped and the second negated.
torch::Tensor RotateHalf(const torch::Tensor& x);

}  // namespace kiln
