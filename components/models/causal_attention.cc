#include "components/models/causal_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

// The BLAS that LibTorch itself calls (OpenBLAS on Debian). Called from inside at::parallel_for,
// an OpenMP build of OpenBLAS runs each product on the calling thread.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace kiln {
namespace {

// Rows of scores per step. Smaller blocks skip more of the masked triangle (at 32 and T = 128, 10
// of 16 tiles are computed) but make smaller, less efficient GEMMs.
constexpr int kCausalRowBlock = 32;

// Row-major C [m, n] = alpha * op(A) op(B) + beta * C, op(A) [m, k], op(B) [k, n]. Column-major
// BLAS sees the row-major C as C^T = op(B)^T op(A)^T, so the operands swap and the flags carry
// over.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  sgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

// s[0, valid) <- softmax(s[0, valid)); s[valid, width) <- 0 (the masked keys of this row block).
void SoftmaxRow(float* s, int valid, int width) {
  float max = s[0];
  for (int j = 1; j < valid; ++j) max = std::max(max, s[j]);
  float sum = 0;
  for (int j = 0; j < valid; ++j) {
    s[j] = std::exp(s[j] - max);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < valid; ++j) s[j] *= inv;
  std::fill(s + valid, s + width, 0.0f);
}

// One head. q, k, v: [t, hd] with row stride ld; o: [t, hd] with row stride ldo. p receives the
// probabilities: all [t, t] rows when `keep` (for the backward), else one block of rows at a time.
void ForwardHead(const float* q, const float* k, const float* v, int ld, int t, int hd, float scale,
                 float* p, bool keep, float* o, int ldo) {
  for (int r0 = 0; r0 < t; r0 += kCausalRowBlock) {
    const int r1 = std::min(t, r0 + kCausalRowBlock), rows = r1 - r0;
    float* block = keep ? p + static_cast<int64_t>(r0) * t : p;
    // Scores of rows [r0, r1) against keys [0, r1): the keys after r1 are masked for all of them.
    Gemm(false, true, rows, r1, hd, scale, q + static_cast<int64_t>(r0) * ld, ld, k, ld, 0.0f,
         block, t);
    for (int i = r0; i < r1; ++i) SoftmaxRow(block + static_cast<int64_t>(i - r0) * t, i + 1, r1);
    Gemm(false, false, rows, hd, r1, 1.0f, block, t, v, ld, 0.0f,
         o + static_cast<int64_t>(r0) * ldo, ldo);
  }
}

// The backward of ForwardHead: dq, dk, dv (row stride ld) from dO (row stride ldo) and the kept
// probabilities p. ds is scratch for one block of rows ([kCausalRowBlock, t]).
void BackwardHead(const float* q, const float* k, const float* v, int ld, int t, int hd,
                  float scale, const float* p, const float* dout, int ldo, float* dq, float* dk,
                  float* dv, float* ds) {
  const int blocks = (t + kCausalRowBlock - 1) / kCausalRowBlock;
  // Last block first: it reaches every key, so it initializes dk and dv (beta 0) and the earlier
  // blocks add to their prefix.
  for (int blk = blocks - 1; blk >= 0; --blk) {
    const int r0 = blk * kCausalRowBlock, r1 = std::min(t, r0 + kCausalRowBlock), rows = r1 - r0;
    const float beta = blk == blocks - 1 ? 0.0f : 1.0f;
    const float* pb = p + static_cast<int64_t>(r0) * t;
    const float* dob = dout + static_cast<int64_t>(r0) * ldo;
    // dv[0, r1) += P^T dO; dP = dO v^T.
    Gemm(true, false, r1, hd, rows, 1.0f, pb, t, dob, ldo, beta, dv, ld);
    Gemm(false, true, rows, r1, hd, 1.0f, dob, ldo, v, ld, 0.0f, ds, t);
    // Softmax backward: dS = P * (dP - rowsum(P * dP)); P is 0 on the masked keys, so is dS.
    for (int i = 0; i < rows; ++i) {
      const float* pi = pb + static_cast<int64_t>(i) * t;
      float* si = ds + static_cast<int64_t>(i) * t;
      float dot = 0;
      for (int j = 0; j < r1; ++j) dot += pi[j] * si[j];
      for (int j = 0; j < r1; ++j) si[j] = pi[j] * (si[j] - dot);
    }
    // dq = scale * dS k; dk[0, r1) += scale * dS^T q.
    Gemm(false, false, rows, hd, r1, scale, ds, t, k, ld, 0.0f, dq + static_cast<int64_t>(r0) * ld,
         ld);
    Gemm(true, false, r1, hd, rows, scale, ds, t, q + static_cast<int64_t>(r0) * ld, ld, beta, dk,
         ld);
  }
}

struct Shape {
  int64_t batch, t, d, heads, hd;
  float scale;
  Shape(const torch::Tensor& qkv, int64_t heads)
      : batch(qkv.size(0)),
        t(qkv.size(1)),
        d(qkv.size(2) / 3),
        heads(heads),
        hd(d / heads),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))) {}
  // Offsets of head `bh` (batch-major) in qkv [B, T, 3D] and in y [B, T, D].
  int64_t qkv_offset(int64_t bh) const { return (bh / heads) * t * 3 * d + (bh % heads) * hd; }
  int64_t y_offset(int64_t bh) const { return (bh / heads) * t * d + (bh % heads) * hd; }
};

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               int64_t heads) {
    torch::Tensor qkv = input.contiguous();
    const Shape s(qkv, heads);
    const bool keep = input.requires_grad();
    torch::Tensor y = torch::empty({s.batch, s.t, s.d}, qkv.options());
    torch::Tensor p = torch::empty({keep ? s.batch * heads : 0, s.t, s.t}, qkv.options());
    const float* in = qkv.data_ptr<float>();
    float* out = y.data_ptr<float>();
    float* probs = p.data_ptr<float>();
    const int t = static_cast<int>(s.t), hd = static_cast<int>(s.hd),
              ld = static_cast<int>(3 * s.d);
    at::parallel_for(0, s.batch * heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(keep ? 0 : static_cast<size_t>(kCausalRowBlock) * t);
      for (int64_t bh = begin; bh < end; ++bh) {
        const float* q = in + s.qkv_offset(bh);
        ForwardHead(q, q + s.d, q + 2 * s.d, ld, t, hd, s.scale,
                    keep ? probs + bh * s.t * s.t : scratch.data(), keep, out + s.y_offset(bh),
                    static_cast<int>(s.d));
      }
    });
    if (keep) {
      ctx->save_for_backward({qkv, p});
      ctx->saved_data["heads"] = heads;
    }
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& qkv = saved[0];
    const torch::Tensor& p = saved[1];
    const Shape s(qkv, ctx->saved_data["heads"].toInt());
    torch::Tensor dy = grads[0].contiguous();
    torch::Tensor dqkv = torch::empty_like(qkv);
    const float* in = qkv.data_ptr<float>();
    const float* probs = p.data_ptr<float>();
    const float* dout = dy.data_ptr<float>();
    float* din = dqkv.data_ptr<float>();
    const int t = static_cast<int>(s.t), hd = static_cast<int>(s.hd),
              ld = static_cast<int>(3 * s.d);
    at::parallel_for(0, s.batch * s.heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> ds(static_cast<size_t>(kCausalRowBlock) * t);
      for (int64_t bh = begin; bh < end; ++bh) {
        const float* q = in + s.qkv_offset(bh);
        float* dq = din + s.qkv_offset(bh);
        BackwardHead(q, q + s.d, q + 2 * s.d, ld, t, hd, s.scale, probs + bh * s.t * s.t,
                     dout + s.y_offset(bh), static_cast<int>(s.d), dq, dq + s.d, dq + 2 * s.d,
                     ds.data());
      }
    });
    return {dqkv, torch::Tensor()};
  }
};

}  // namespace

bool CausalAttentionSupports(const torch::Tensor& qkv, int64_t heads) {
  return qkv.device().is_cpu() &&
         (qkv.scalar_type() == torch::kFloat32 || qkv.scalar_type() == torch::kBFloat16) && qkv.dim() == 3 &&
         heads > 0 && qkv.size(2) % (3 * heads) == 0 && qkv.size(1) > 0 &&
         qkv.layout() == torch::kStrided;
}

torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t heads) {
  TORCH_CHECK(CausalAttentionSupports(qkv, heads), "CausalAttention: unsupported input ",
              qkv.sizes(), " ", qkv.dtype(), " on ", qkv.device());
  if (qkv.scalar_type() == torch::kBFloat16) {
    // bf16 autocast: the scores, the softmax and their backward in float32 (autocast's softmax
    // would also compute in float32); the casts are autograd ops, so the gradient comes back in bf16.
    return CausalAttentionFunction::apply(qkv.to(torch::kFloat32), heads).to(torch::kBFloat16);
  }
  return CausalAttentionFunction::apply(qkv, heads);
}

}  // namespace kiln
