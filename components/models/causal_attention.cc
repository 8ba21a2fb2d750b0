#include "components/models/causal_attention.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "components/common/parallel.h"
#include "components/models/bf16_lanes.h"

// The BLAS that LibTorch itself calls: MKL, which libtorch_cpu of PyPI's wheel carries and exports.
// Called from inside ParallelFor (an OpenMP parallel region), it runs each product on the calling
// thread.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace kiln {
namespace {

// Rows of scores per step. Smaller blocks skip more of the masked triangle (at 32 and T = 128, 10
// of 16 tiles are computed) but make smaller, less efficient GEMMs.
constexpr int kCausalRowBlock = 32;
// bf16's products are MKL's cblas_gemm_bf16bf16f32, whose cost per call (with AMX, a tile setup)
// outweighs the masked tiles at 32 rows: the GPT's forward and backward (B 32, T 128, 4 heads of
// 32) took 4.50 ms at 32 rows, 3.85 at 64 and 3.84 at 128 on an AMX Xeon (kernels_speed), while
// float32's sgemm stays fastest at 32. At 64, long sequences still skip most of the triangle.
constexpr int kCausalRowBlockBf16 = 64;

// Row-major C [m, n] = alpha * op(A) op(B) + beta * C, op(A) [m, k], op(B) [k, n]. Column-major
// BLAS sees the row-major C as C^T = op(B)^T op(A)^T, so the operands swap and the flags carry
// over.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  sgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

// s[0, valid) <- softmax(s[0, valid)); s[valid, width) <- 0 (the masked keys of this row block).
// Where the CPU has AVX2 and FMA, SoftmaxRowLanes below instead.
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

// ds[0, n) <- p * (ds - sum(p ds)) (the softmax backward of one row, in place).
void SoftmaxBackwardRow(const float* p, float* ds, int n) {
  float dot = 0;
  for (int j = 0; j < n; ++j) dot += p[j] * ds[j];
  for (int j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - dot);
}

#ifdef KILN_BF16_LANES
KILN_AVX2 inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

KILN_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
}

// SoftmaxRow on 8 AVX2 lanes, exp by bf16::Exp8 (Cephes' polynomial, about 1 ulp from std::exp;
// std::exp one value at a time was most of the forward's time, in bf16 and in float32 alike):
// out[0, valid) <- softmax(s[0, valid)) in Out (float32 or bf16, rounded once), out[valid, width)
// <- 0; s[0, valid) is overwritten with the unnormalized exponentials. `out` may be `s`.
template <typename Out>
KILN_AVX2 void SoftmaxRowLanes(float* s, int valid, int width, Out* out) {
  const int full = valid / 8 * 8, rest = valid - full;
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int j = 0; j < full; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
  float max = HorizontalMax(mv);
  for (int j = full; j < valid; ++j) max = std::max(max, s[j]);
  const __m256 maxv = _mm256_set1_ps(max);
  __m256 sumv = _mm256_setzero_ps();
  for (int j = 0; j < full; j += 8) {
    const __m256 e = bf16::Exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), maxv));
    _mm256_storeu_ps(s + j, e);
    sumv = _mm256_add_ps(sumv, e);
  }
  float tail[8] = {};
  if (rest > 0) {  // the last valid % 8 through the same lanes, padded with the max (unused)
    std::copy(s + full, s + valid, tail);
    std::fill(tail + rest, tail + 8, max);
    _mm256_storeu_ps(tail, bf16::Exp8(_mm256_sub_ps(_mm256_loadu_ps(tail), maxv)));
    std::fill(tail + rest, tail + 8, 0.0f);
  }
  const __m256 inv =
      _mm256_set1_ps(1.0f / HorizontalSum(_mm256_add_ps(sumv, _mm256_loadu_ps(tail))));
  for (int j = 0; j < full; j += 8)
    bf16::Store8(out + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
  if (rest > 0) {
    Out rounded[8];
    bf16::Store8(rounded, _mm256_mul_ps(_mm256_loadu_ps(tail), inv));
    std::copy(rounded, rounded + rest, out + full);
  }
  std::fill(out + valid, out + width, Out(0.0f));
}

// The softmax backward of one row on 8 AVX2 lanes: ds[0, n) <- p * (dp - sum(p dp)) in D (float32
// or bf16), p the kept probabilities (float32 or bf16), dp the float32 gradient of the
// probabilities. `ds` may be `dp`.
template <typename P, typename D>
KILN_AVX2 void SoftmaxBackwardRowLanes(const P* p, const float* dp, int n, D* ds) {
  const int full = n / 8 * 8;
  __m256 acc = _mm256_setzero_ps();
  for (int j = 0; j < full; j += 8)
    acc = _mm256_fmadd_ps(bf16::Load8(p + j), _mm256_loadu_ps(dp + j), acc);
  float dot = HorizontalSum(acc);
  for (int j = full; j < n; ++j) dot += static_cast<float>(p[j]) * dp[j];
  const __m256 dotv = _mm256_set1_ps(dot);
  for (int j = 0; j < full; j += 8) {
    bf16::Store8(ds + j,
                 _mm256_mul_ps(bf16::Load8(p + j), _mm256_sub_ps(_mm256_loadu_ps(dp + j), dotv)));
  }
  for (int j = full; j < n; ++j) ds[j] = D(static_cast<float>(p[j]) * (dp[j] - dot));
}
#endif  // KILN_BF16_LANES

void SoftmaxRowF32(float* s, int valid, int width) {
#ifdef KILN_BF16_LANES
  if (bf16::HasAvx2Fma()) return SoftmaxRowLanes(s, valid, width, s);
#endif
  SoftmaxRow(s, valid, width);
}

void SoftmaxBackwardRowF32(const float* p, float* ds, int n) {
#ifdef KILN_BF16_LANES
  if (bf16::HasAvx2Fma()) return SoftmaxBackwardRowLanes(p, ds, n, ds);
#endif
  SoftmaxBackwardRow(p, ds, n);
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
    for (int i = r0; i < r1; ++i)
      SoftmaxRowF32(block + static_cast<int64_t>(i - r0) * t, i + 1, r1);
    Gemm(false, false, rows, hd, r1, 1.0f, block, t, v, ld, 0.0f,
         o + static_cast<int64_t>(r0) * ldo, ldo);
  }
}

// The backward of ForwardHead: dq, dk, dv (row stride ld) from dO (row stride ldo) and the kept
// probabilities p. ds is scratch for one block of rows ([kCausalRowBlock, t]). dk and dv are
// written, or added to when `accumulate` (the second and later query heads of a key/value head).
void BackwardHead(const float* q, const float* k, const float* v, int ld, int t, int hd,
                  float scale, const float* p, const float* dout, int ldo, float* dq, float* dk,
                  float* dv, float* ds, bool accumulate) {
  const int blocks = (t + kCausalRowBlock - 1) / kCausalRowBlock;
  // Last block first: it reaches every key, so it initializes dk and dv (beta 0) and the earlier
  // blocks add to their prefix.
  for (int blk = blocks - 1; blk >= 0; --blk) {
    const int r0 = blk * kCausalRowBlock, r1 = std::min(t, r0 + kCausalRowBlock), rows = r1 - r0;
    const float beta = blk == blocks - 1 && !accumulate ? 0.0f : 1.0f;
    const float* pb = p + static_cast<int64_t>(r0) * t;
    const float* dob = dout + static_cast<int64_t>(r0) * ldo;
    // dv[0, r1) += P^T dO; dP = dO v^T.
    Gemm(true, false, r1, hd, rows, 1.0f, pb, t, dob, ldo, beta, dv, ld);
    Gemm(false, true, rows, r1, hd, 1.0f, dob, ldo, v, ld, 0.0f, ds, t);
    // Softmax backward: dS = P * (dP - rowsum(P * dP)); P is 0 on the masked keys, so is dS.
    for (int i = 0; i < rows; ++i) {
      SoftmaxBackwardRowF32(pb + static_cast<int64_t>(i) * t, ds + static_cast<int64_t>(i) * t, r1);
    }
    // dq = scale * dS k; dk[0, r1) += scale * dS^T q.
    Gemm(false, false, rows, hd, r1, scale, ds, t, k, ld, 0.0f, dq + static_cast<int64_t>(r0) * ld,
         ld);
    Gemm(true, false, r1, hd, rows, scale, ds, t, q + static_cast<int64_t>(r0) * ld, ld, beta, dk,
         ld);
  }
}

#ifdef KILN_BF16_LANES
using Bf16 = c10::BFloat16;

// A bf16 GEMM, row-major: C (float32) = alpha op(A) op(B) + beta C with A and B bf16, on the CPU's
// AVX-512 BF16 or AMX instructions where it has them. Looked up at run time in what LibTorch
// loaded: MKL's cblas_gemm_bf16bf16f32, which PyPI's libtorch_cpu carries and exports, else
// oneDNN's dnnl_gemm_bf16bf16f32 in a shared libdnnl (Debian's LibTorch); a LibTorch with neither
// keeps the float32 path. Called inside ParallelFor, either runs on the calling thread (OpenMP).
using DnnlGemmBf16 = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                             const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                             float beta, float* c, int64_t ldc);
using CblasGemmBf16 = void (*)(int layout, int transa, int transb, int m, int n, int k, float alpha,
                               const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta,
                               float* c, int ldc);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

struct Bf16Gemm {
  CblasGemmBf16 mkl = nullptr;
  DnnlGemmBf16 dnnl = nullptr;
  explicit operator bool() const { return mkl != nullptr || dnnl != nullptr; }
};

const Bf16Gemm& FindGemmBf16() {
  static const Bf16Gemm gemm = [] {
    Bf16Gemm found;
    if (!__builtin_cpu_supports("avx2")) return found;  // the conversions below
    // Each refuses CPUs its bf16 kernels do not cover (or computes wrongly): try 1 x 1 x 1 once.
    const uint16_t one = 0x3f80;  // 1.0 in bf16
    if (auto f = reinterpret_cast<CblasGemmBf16>(dlsym(RTLD_DEFAULT, "cblas_gemm_bf16bf16f32"))) {
      float c = 0;
      f(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1);
      if (c == 1.0f) found.mkl = f;
    }
    if (found.mkl == nullptr) {
      if (void* lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_NOLOAD)) {
        auto f = reinterpret_cast<DnnlGemmBf16>(dlsym(lib, "dnnl_gemm_bf16bf16f32"));
        float c = 0;
        if (f != nullptr && f('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) == 0 &&
            c == 1.0f)
          found.dnnl = f;
      }
    }
    return found;
  }();
  return gemm;
}

void GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const Bf16* a, int lda,
              const Bf16* b, int ldb, float beta, float* c, int ldc) {
  const Bf16Gemm& gemm = FindGemmBf16();
  const auto* a16 = reinterpret_cast<const uint16_t*>(a);
  const auto* b16 = reinterpret_cast<const uint16_t*>(b);
  if (gemm.mkl != nullptr) {
    gemm.mkl(kCblasRowMajor, trans_a ? kCblasTrans : kCblasNoTrans,
             trans_b ? kCblasTrans : kCblasNoTrans, m, n, k, alpha, a16, lda, b16, ldb, beta, c,
             ldc);
  } else {
    gemm.dnnl(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a16, lda, b16, ldb, beta, c,
              ldc);
  }
}

// Per-thread float32 workspace of the bf16 path.
struct Bf16Scratch {
  std::vector<float> rows_t, rows_hd, t_hd, t_hd2;  // [block, t], [block, hd], [t, hd] x2
  std::vector<Bf16> rows_t16;                       // [block, t]
  Bf16Scratch(int t, int hd)
      : rows_t(static_cast<size_t>(kCausalRowBlockBf16) * t),
        rows_hd(static_cast<size_t>(kCausalRowBlockBf16) * hd),
        t_hd(static_cast<size_t>(t) * hd),
        t_hd2(t_hd.size()),
        rows_t16(rows_t.size()) {}
};

// ForwardHead on bf16 q, k, v: bf16 products with float32 results; the scores and the softmax in
// float32, the probabilities rounded to bf16 for the product with v (and kept so for the backward:
// `p` [t, t] when keep), y rounded once.
void ForwardHeadBf16(const Bf16* q, const Bf16* k, const Bf16* v, int ld, int t, int hd,
                     float scale, Bf16* p, bool keep, Bf16* o, int ldo, Bf16Scratch& s) {
  for (int r0 = 0; r0 < t; r0 += kCausalRowBlockBf16) {
    const int r1 = std::min(t, r0 + kCausalRowBlockBf16), rows = r1 - r0;
    float* scores = s.rows_t.data();
    GemmBf16(false, true, rows, r1, hd, scale, q + static_cast<int64_t>(r0) * ld, ld, k, ld, 0.0f,
             scores, t);
    Bf16* probs = keep ? p + static_cast<int64_t>(r0) * t : s.rows_t16.data();
    for (int i = r0; i < r1; ++i) {
      float* row = scores + static_cast<int64_t>(i - r0) * t;
      SoftmaxRowLanes(row, i + 1, r1, probs + static_cast<int64_t>(i - r0) * t);
    }
    GemmBf16(false, false, rows, hd, r1, 1.0f, probs, t, v, ld, 0.0f, s.rows_hd.data(), hd);
    for (int i = 0; i < rows; ++i) {
      bf16::Convert(s.rows_hd.data() + static_cast<int64_t>(i) * hd,
                    o + static_cast<int64_t>(r0 + i) * ldo, hd);
    }
  }
}

// BackwardHead on bf16: dk and dv accumulate over row blocks (and over the query heads of a
// key/value head: `accumulate` on all but the first) in float32, and are rounded once, by the
// group's last head (`round`).
void BackwardHeadBf16(const Bf16* q, const Bf16* k, const Bf16* v, int ld, int t, int hd,
                      float scale, const Bf16* p, const Bf16* dout, int ldo, Bf16* dq, Bf16* dk,
                      Bf16* dv, Bf16Scratch& s, bool accumulate, bool round) {
  const int blocks = (t + kCausalRowBlockBf16 - 1) / kCausalRowBlockBf16;
  float *dkf = s.t_hd.data(), *dvf = s.t_hd2.data();
  for (int blk = blocks - 1; blk >= 0; --blk) {
    const int r0 = blk * kCausalRowBlockBf16, r1 = std::min(t, r0 + kCausalRowBlockBf16),
              rows = r1 - r0;
    const float beta = blk == blocks - 1 && !accumulate ? 0.0f : 1.0f;
    const Bf16* pb = p + static_cast<int64_t>(r0) * t;
    const Bf16* dob = dout + static_cast<int64_t>(r0) * ldo;
    GemmBf16(true, false, r1, hd, rows, 1.0f, pb, t, dob, ldo, beta, dvf, hd);
    float* ds = s.rows_t.data();
    GemmBf16(false, true, rows, r1, hd, 1.0f, dob, ldo, v, ld, 0.0f, ds, t);
    Bf16* ds16 = s.rows_t16.data();
    for (int i = 0; i < rows; ++i) {
      SoftmaxBackwardRowLanes(pb + static_cast<int64_t>(i) * t, ds + static_cast<int64_t>(i) * t,
                              r1, ds16 + static_cast<int64_t>(i) * t);
    }
    GemmBf16(false, false, rows, hd, r1, scale, ds16, t, k, ld, 0.0f, s.rows_hd.data(), hd);
    for (int i = 0; i < rows; ++i) {
      bf16::Convert(s.rows_hd.data() + static_cast<int64_t>(i) * hd,
                    dq + static_cast<int64_t>(r0 + i) * ld, hd);
    }
    GemmBf16(true, false, r1, hd, rows, scale, ds16, t, q + static_cast<int64_t>(r0) * ld, ld, beta,
             dkf, hd);
  }
  for (int j = 0; round && j < t; ++j) {
    bf16::Convert(dkf + static_cast<int64_t>(j) * hd, dk + static_cast<int64_t>(j) * ld, hd);
    bf16::Convert(dvf + static_cast<int64_t>(j) * hd, dv + static_cast<int64_t>(j) * ld, hd);
  }
}
#endif  // KILN_BF16_LANES

// qkv [B, T, (heads + 2 kv_heads) hd]: q's heads, then k's, then v's; query head h reads key/value
// head h / (heads / kv_heads).
struct Shape {
  int64_t batch, t, heads, kv_heads, hd, d, ld;  // d: the queries' width; ld: qkv's row
  float scale;
  Shape(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads)
      : batch(qkv.size(0)),
        t(qkv.size(1)),
        heads(heads),
        kv_heads(kv_heads),
        hd(qkv.size(2) / (heads + 2 * kv_heads)),
        d(heads * hd),
        ld(qkv.size(2)),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))) {}
  int64_t group() const { return heads / kv_heads; }
  // Offsets of query head `bh` (batch-major) in qkv and in y [B, T, D], and of its key and value
  // heads in qkv.
  int64_t q_offset(int64_t bh) const { return (bh / heads) * t * ld + (bh % heads) * hd; }
  int64_t k_offset(int64_t bh) const {
    return (bh / heads) * t * ld + d + (bh % heads) / group() * hd;
  }
  int64_t v_offset(int64_t bh) const { return k_offset(bh) + kv_heads * hd; }
  int64_t y_offset(int64_t bh) const { return (bh / heads) * t * d + (bh % heads) * hd; }
};

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               int64_t heads, int64_t kv_heads) {
    torch::Tensor qkv = input.contiguous();
    const Shape s(qkv, heads, kv_heads);
    const bool keep = input.requires_grad();
    torch::Tensor y = torch::empty({s.batch, s.t, s.d}, qkv.options());
    torch::Tensor p = torch::empty({keep ? s.batch * heads : 0, s.t, s.t}, qkv.options());
    if (keep) {
      ctx->save_for_backward({qkv, p});
      ctx->saved_data["heads"] = heads;
      ctx->saved_data["kv_heads"] = kv_heads;
    }
#ifdef KILN_BF16_LANES
    if (qkv.scalar_type() == torch::kBFloat16) {
      const Bf16* in = qkv.data_ptr<Bf16>();
      Bf16* out = y.data_ptr<Bf16>();
      Bf16* probs = p.data_ptr<Bf16>();
      const int t = static_cast<int>(s.t), hd = static_cast<int>(s.hd), ld = static_cast<int>(s.ld);
      ParallelFor(0, s.batch * heads, 1, [&](int64_t begin, int64_t end) {
        Bf16Scratch scratch(t, hd);
        for (int64_t bh = begin; bh < end; ++bh) {
          ForwardHeadBf16(in + s.q_offset(bh), in + s.k_offset(bh), in + s.v_offset(bh), ld, t, hd,
                          s.scale, keep ? probs + bh * s.t * s.t : nullptr, keep,
                          out + s.y_offset(bh), static_cast<int>(s.d), scratch);
        }
      });
      return y;
    }
#endif
    const float* in = qkv.data_ptr<float>();
    float* out = y.data_ptr<float>();
    float* probs = p.data_ptr<float>();
    const int t = static_cast<int>(s.t), hd = static_cast<int>(s.hd), ld = static_cast<int>(s.ld);
    ParallelFor(0, s.batch * heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(keep ? 0 : static_cast<size_t>(kCausalRowBlock) * t);
      for (int64_t bh = begin; bh < end; ++bh) {
        ForwardHead(in + s.q_offset(bh), in + s.k_offset(bh), in + s.v_offset(bh), ld, t, hd,
                    s.scale, keep ? probs + bh * s.t * s.t : scratch.data(), keep,
                    out + s.y_offset(bh), static_cast<int>(s.d));
      }
    });
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& qkv = saved[0];
    const torch::Tensor& p = saved[1];
    const Shape s(qkv, ctx->saved_data["heads"].toInt(), ctx->saved_data["kv_heads"].toInt());
    torch::Tensor dy = grads[0].to(qkv.scalar_type()).contiguous();
    torch::Tensor dqkv = torch::empty_like(qkv);
#ifdef KILN_BF16_LANES
    if (qkv.scalar_type() == torch::kBFloat16) {
      const Bf16* in = qkv.data_ptr<Bf16>();
      const Bf16* probs = p.data_ptr<Bf16>();
      const Bf16* dout = dy.data_ptr<Bf16>();
      Bf16* din = dqkv.data_ptr<Bf16>();
      const int t = static_cast<int>(s.t), hd = static_cast<int>(s.hd), ld = static_cast<int>(s.ld);
      // One task per key/value head, which its query heads' gradients add to in turn.
      ParallelFor(0, s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
        Bf16Scratch scratch(t, hd);
        for (int64_t kv = begin; kv < end; ++kv) {
          for (int64_t i = 0; i < s.group(); ++i) {
            const int64_t bh = kv * s.group() + i;
            BackwardHeadBf16(in + s.q_offset(bh), in + s.k_offset(bh), in + s.v_offset(bh), ld, t,
                             hd, s.scale, probs + bh * s.t * s.t, dout + s.y_offset(bh),
                             static_cast<int>(s.d), din + s.q_offset(bh), din + s.k_offset(bh),
                             din + s.v_offset(bh), scratch, i > 0, i + 1 == s.group());
          }
        }
      });
      return {dqkv, torch::Tensor(), torch::Tensor()};
    }
#endif
    const float* in = qkv.data_ptr<float>();
    const float* probs = p.data_ptr<float>();
    const float* dout = dy.data_ptr<float>();
    float* din = dqkv.data_ptr<float>();
    const int t = static_cast<int>(s.t), hd = static_cast<int>(s.hd), ld = static_cast<int>(s.ld);
    ParallelFor(0, s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> ds(static_cast<size_t>(kCausalRowBlock) * t);
      for (int64_t kv = begin; kv < end; ++kv) {
        for (int64_t i = 0; i < s.group(); ++i) {
          const int64_t bh = kv * s.group() + i;
          BackwardHead(in + s.q_offset(bh), in + s.k_offset(bh), in + s.v_offset(bh), ld, t, hd,
                       s.scale, probs + bh * s.t * s.t, dout + s.y_offset(bh),
                       static_cast<int>(s.d), din + s.q_offset(bh), din + s.k_offset(bh),
                       din + s.v_offset(bh), ds.data(), i > 0);
        }
      }
    });
    return {dqkv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool CausalAttentionHasBf16Kernel() {
#ifdef KILN_BF16_LANES
  return static_cast<bool>(FindGemmBf16());
#else
  return false;
#endif
}

bool CausalAttentionSupports(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads) {
  if (kv_heads == 0) kv_heads = heads;
  return qkv.device().is_cpu() &&
         (qkv.scalar_type() == torch::kFloat32 || qkv.scalar_type() == torch::kBFloat16) &&
         qkv.dim() == 3 && heads > 0 && kv_heads > 0 && heads % kv_heads == 0 &&
         qkv.size(2) % (heads + 2 * kv_heads) == 0 && qkv.size(1) > 0 &&
         qkv.layout() == torch::kStrided;
}

torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads) {
  if (kv_heads == 0) kv_heads = heads;
  TORCH_CHECK(CausalAttentionSupports(qkv, heads, kv_heads), "CausalAttention: unsupported input ",
              qkv.sizes(), " ", qkv.dtype(), " on ", qkv.device());
  if (qkv.scalar_type() == torch::kBFloat16 && !CausalAttentionHasBf16Kernel()) {
    // bf16 autocast without a bf16 GEMM: the float32 kernel between two casts (autograd
    // ops, so the gradient comes back in bf16).
    return CausalAttentionFunction::apply(qkv.to(torch::kFloat32), heads, kv_heads)
        .to(torch::kBFloat16);
  }
  return CausalAttentionFunction::apply(qkv, heads, kv_heads);
}

}  // namespace kiln
