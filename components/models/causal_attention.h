// Causal multi-head attention as one CPU kernel (forward and backward), for float32 and bfloat16
// tensors (bf16 autocast; the products in bf16 on MKL or oneDNN, the scores and softmax in
// float32): y = softmax(q k^T / sqrt(hd) + causal mask) v for every head, where q, k and v are read
// in place from c_attn's output and y is written with the heads already concatenated.
//
// Why: ATen runs attention as batched GEMMs of [T, hd] x [hd, T] one head after another, each
// split over all threads, then softmax and its backward as separate passes over [B, H, T, T]. Here
// the threads take whole heads instead (each GEMM runs on one thread, inside the parallel loop),
// the scores of one head stay in cache between the GEMM, the softmax and the next GEMM, and the
// blocks above the diagonal are never computed: rows are taken kCausalRowBlock at a time, and a
// block of rows only multiplies the keys at or before its last row. On bf16 the softmax and its
// backward run on 8 AVX2 lanes (exp: bf16_lanes.h's Exp8, Cephes' polynomial); the float32 kernel
// keeps std::exp, so its results stay as they were.
#pragma once

#include <torch/torch.h>

namespace kiln {

// Whether CausalAttention can take these activations: CPU, float32 or bfloat16, [B, T, 3 * D], D
// divisible by `heads`. Anything else (CUDA, double, ...) goes through ATen's ops instead.
bool CausalAttentionSupports(const torch::Tensor& qkv, int64_t heads);

// Whether bf16 inputs take the bf16 kernel (MKL's or oneDNN's bf16 GEMM found and usable on this
// CPU); otherwise they go through the float32 kernel between two casts.
bool CausalAttentionHasBf16Kernel();

// qkv [B, T, 3 * D]: q, k, v side by side, each `heads` heads of D / heads (c_attn's layout).
// Returns [B, T, D] in qkv's dtype, differentiable with respect to qkv (once: the backward is not
// itself differentiable).
torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t heads);

}  // namespace kiln
