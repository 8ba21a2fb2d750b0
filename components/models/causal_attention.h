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
// block of rows only multiplies the keys at or before its last row. The softmax and its backward
// run on 8 AVX2 lanes where the CPU has AVX2 and FMA (exp: bf16_lanes.h's Exp8, Cephes'
// polynomial, about 1 ulp from std::exp), in float32 and bf16 alike; elsewhere std::exp.
#pragma once

#include <torch/torch.h>

namespace kiln {

// Whether CausalAttention can take these activations: CPU, float32 or bfloat16, [B, T, (heads +
// 2 kv_heads) hd], heads divisible by kv_heads (0: as many as heads). Anything else (CUDA, double,
// ...) goes through ATen's ops instead.
bool CausalAttentionSupports(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads = 0);

// Whether bf16 inputs take the bf16 kernel (MKL's or oneDNN's bf16 GEMM found and usable on this
// CPU); otherwise they go through the float32 kernel between two casts.
bool CausalAttentionHasBf16Kernel();

// qkv [B, T, (heads + 2 kv_heads) hd]: q's `heads` heads, then k's and v's `kv_heads` each, side
// by side (c_attn's layout where kv_heads is heads, its default as 0). With fewer key/value heads
// (grouped-query attention), query head h attends with key/value head h / (heads / kv_heads),
// read in place: nothing is repeated, and the backward adds the group's gradients of each key and
// value head in float32. Returns [B, T, heads hd] in qkv's dtype, differentiable with respect to
// qkv (once: the backward is not itself differentiable).
torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads = 0);

}  // namespace kiln
