#include "components/models/llama_kernels.h"

#include <torch/csrc/jit/frontend/tracer.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "components/common/parallel.h"
#include "components/models/bf16_lanes.h"

namespace kiln {
namespace {

constexpr int64_t kNormRowGrain = 64;  // rows per parallel task, and per partial sum of a gradient

// The sum of term(0) .. term(dim - 1) in 8 interleaved partial sums (the order is fixed: the
// results do not depend on how rows are split among threads, and the compiler can use lanes).
template <typename Term>
float LaneSum(int64_t dim, Term term) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += term(i + j);
  }
  float sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
              ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  for (; i < dim; ++i) sum += term(i);
  return sum;
}

// The sum of a row's squares.
template <typename T>
float SumOfSquares(const T* row, int64_t dim) {
  return LaneSum(dim, [row](int64_t i) {
    const float v = static_cast<float>(row[i]);
    return v * v;
  });
}

#ifdef KILN_BF16_LANES
// The rows below on AVX2 lanes, where the CPU has them: lane j of a sum is LaneSum's partial[j]
// and LaneTotal adds the lanes in LaneSum's order, so each row's sums are taken in the same order
// as the scalar rows' (a row's tail, dim % 8, is added after, as LaneSum adds it).
using bf16::Load8;
using bf16::Store8;

KILN_AVX2 inline float LaneTotal(__m256 v) {
  alignas(32) float p[8];
  _mm256_store_ps(p, v);
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// v rounded to T and widened back (bf16's rounding; float32's is none).
KILN_AVX2 inline __m256 RoundedTo(const float* /*type*/, __m256 v) { return v; }
KILN_AVX2 inline __m256 RoundedTo(const c10::BFloat16* /*type*/, __m256 v) {
  c10::BFloat16 rounded[8];
  Store8(rounded, v);
  return Load8(rounded);
}
#endif

// Whether this CPU runs the *Lanes rows (x86-64 with AVX2 and FMA).
bool UseLanes() {
#ifdef KILN_BF16_LANES
  return bf16::HasAvx2Fma();
#else
  return false;
#endif
}

// One row of RMSNorm: out = w * T(x * scale), scale = rsqrt(mean(x^2) + eps), returned.
template <typename T>
float NormRow(const T* row, const T* w, int64_t dim, float epsilon, T* out) {
  const float scale = 1.0f / std::sqrt(SumOfSquares(row, dim) / static_cast<float>(dim) + epsilon);
  for (int64_t i = 0; i < dim; ++i) {
    const T normalized = static_cast<T>(static_cast<float>(row[i]) * scale);
    out[i] = static_cast<T>(static_cast<float>(w[i]) * static_cast<float>(normalized));
  }
  return scale;
}

#ifdef KILN_BF16_LANES
template <typename T>
KILN_AVX2 float NormRowLanes(const T* row, const T* w, int64_t dim, float epsilon, T* out) {
  const int64_t body = dim - dim % 8;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 v = Load8(row + i);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
  }
  float squares = LaneTotal(acc);
  for (int64_t i = body; i < dim; ++i) {
    const float v = static_cast<float>(row[i]);
    squares += v * v;
  }
  const float scale = 1.0f / std::sqrt(squares / static_cast<float>(dim) + epsilon);
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 normalized = RoundedTo(row, _mm256_mul_ps(Load8(row + i), s));
    Store8(out + i, _mm256_mul_ps(Load8(w + i), normalized));
  }
  for (int64_t i = body; i < dim; ++i) {
    const T normalized = static_cast<T>(static_cast<float>(row[i]) * scale);
    out[i] = static_cast<T>(static_cast<float>(w[i]) * static_cast<float>(normalized));
  }
  return scale;
}
#endif

// out = w * T(x * scale) row by row; each row's scale into `scales` when it is not null.
template <typename T>
torch::Tensor NormRows(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                       float* scales) {
  torch::Tensor out = torch::empty_like(x);
  const int64_t dim = x.size(-1), rows = x.numel() / std::max<int64_t>(dim, 1);
  const T* in = x.data_ptr<T>();
  const torch::Tensor scale_by = weight.contiguous();
  const T* w = scale_by.data_ptr<T>();
  T* o = out.data_ptr<T>();
  const float epsilon = static_cast<float>(eps);
  [[maybe_unused]] const bool lanes = UseLanes();
  ParallelFor(0, rows, kNormRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
#ifdef KILN_BF16_LANES
      const float scale = lanes ? NormRowLanes(in + r * dim, w, dim, epsilon, o + r * dim)
                                : NormRow(in + r * dim, w, dim, epsilon, o + r * dim);
#else
      const float scale = NormRow(in + r * dim, w, dim, epsilon, o + r * dim);
#endif
      if (scales != nullptr) scales[r] = scale;
    }
  });
  return out;
}

// One row of RMSNorm's backward (float32): g = dy * w (into `g`, dim floats of scratch),
// dx = s (g - x s mean(g * x s)), and dy * x s added into dw.
void RmsNormBackwardRow(const float* xr, const float* dyr, const float* w, float s, int64_t dim,
                        float* g, float* dw, float* dxr) {
  for (int64_t i = 0; i < dim; ++i) {
    g[i] = dyr[i] * w[i];
    dw[i] += dyr[i] * (xr[i] * s);
  }
  const float mean =
      LaneSum(dim, [&](int64_t i) { return g[i] * (xr[i] * s); }) / static_cast<float>(dim);
  for (int64_t i = 0; i < dim; ++i) dxr[i] = s * (g[i] - xr[i] * s * mean);
}

#ifdef KILN_BF16_LANES
KILN_AVX2 void RmsNormBackwardRowLanes(const float* xr, const float* dyr, const float* w, float s,
                                       int64_t dim, float* g, float* dw, float* dxr) {
  const int64_t body = dim - dim % 8;
  const __m256 sv = _mm256_set1_ps(s);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 n = _mm256_mul_ps(_mm256_loadu_ps(xr + i), sv);
    const __m256 dy = _mm256_loadu_ps(dyr + i);
    const __m256 gv = _mm256_mul_ps(dy, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(g + i, gv);
    _mm256_storeu_ps(dw + i, _mm256_add_ps(_mm256_loadu_ps(dw + i), _mm256_mul_ps(dy, n)));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(gv, n));
  }
  float dot = LaneTotal(acc);
  for (int64_t i = body; i < dim; ++i) {
    g[i] = dyr[i] * w[i];
    dw[i] += dyr[i] * (xr[i] * s);
    dot += g[i] * (xr[i] * s);
  }
  const float mean = dot / static_cast<float>(dim);
  const __m256 m = _mm256_set1_ps(mean);
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 n = _mm256_mul_ps(_mm256_loadu_ps(xr + i), sv);
    _mm256_storeu_ps(dxr + i,
                     _mm256_mul_ps(sv, _mm256_sub_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(n, m))));
  }
  for (int64_t i = body; i < dim; ++i) dxr[i] = s * (g[i] - xr[i] * s * mean);
}
#endif

// float32 rows with autograd: the forward keeps each row's scale s = rsqrt(mean(x^2) + eps); with
// g = dy * w and n = x * s, dx = s (g - n * mean(g * n)) and dw = the sum over rows of dy * n.
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    const int64_t dim = x.size(-1);
    torch::Tensor scales = torch::empty({x.numel() / std::max<int64_t>(dim, 1)}, x.options());
    torch::Tensor y = NormRows<float>(x, weight, eps, scales.data_ptr<float>());
    ctx->save_for_backward({x, weight, scales});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor weight = saved[1].contiguous();
    const torch::Tensor& scales = saved[2];
    const torch::Tensor dy = grads[0].to(torch::kFloat32).contiguous();
    const int64_t dim = x.size(-1), rows = scales.numel();
    const int64_t blocks = (rows + kNormRowGrain - 1) / kNormRowGrain;
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor partial = torch::zeros({std::max<int64_t>(blocks, 1), dim}, x.options());
    const float *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>(),
                *sp = scales.data_ptr<float>(), *gp = dy.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *pp = partial.data_ptr<float>();
    [[maybe_unused]] const bool lanes = UseLanes();
    ParallelFor(0, blocks, 1, [&](int64_t first, int64_t last) {
      std::vector<float> g(dim);
      for (int64_t block = first; block < last; ++block) {
        float* dw = pp + block * dim;
        const int64_t end = std::min(rows, (block + 1) * kNormRowGrain);
        for (int64_t r = block * kNormRowGrain; r < end; ++r) {
#ifdef KILN_BF16_LANES
          if (lanes) {
            RmsNormBackwardRowLanes(xp + r * dim, gp + r * dim, wp, sp[r], dim, g.data(), dw,
                                    dxp + r * dim);
            continue;
          }
#endif
          RmsNormBackwardRow(xp + r * dim, gp + r * dim, wp, sp[r], dim, g.data(), dw,
                             dxp + r * dim);
        }
      }
    });
    torch::Tensor dw = partial.sum(0);
    return {dx, dw.to(saved[1].scalar_type()), torch::Tensor()};
  }
};

// One row of LayerNorm (below): `centered` is dim floats of scratch; the row's mean and rstd go to
// stat[0] and stat[1] when `stat` is not null.
template <typename Out>
void LayerNormRow(const float* row, const float* w, const float* b, int64_t dim, float epsilon,
                  float* centered, Out* out, float* stat) {
  const float mean = LaneSum(dim, [row](int64_t i) { return row[i]; }) / static_cast<float>(dim);
  for (int64_t i = 0; i < dim; ++i) centered[i] = row[i] - mean;
  const float var = SumOfSquares(centered, dim) / static_cast<float>(dim);
  const float rstd = 1.0f / std::sqrt(var + epsilon);
  if (stat != nullptr) {
    stat[0] = mean;
    stat[1] = rstd;
  }
  for (int64_t i = 0; i < dim; ++i) out[i] = static_cast<Out>(centered[i] * rstd * w[i] + b[i]);
}

#ifdef KILN_BF16_LANES
template <typename Out>
KILN_AVX2 void LayerNormRowLanes(const float* row, const float* w, const float* b, int64_t dim,
                                 float epsilon, float* centered, Out* out, float* stat) {
  const int64_t body = dim - dim % 8;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(row + i));
  float sum = LaneTotal(acc);
  for (int64_t i = body; i < dim; ++i) sum += row[i];
  const float mean = sum / static_cast<float>(dim);
  const __m256 m = _mm256_set1_ps(mean);
  acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(row + i), m);
    _mm256_storeu_ps(centered + i, c);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(c, c));
  }
  float squares = LaneTotal(acc);
  for (int64_t i = body; i < dim; ++i) {
    centered[i] = row[i] - mean;
    squares += centered[i] * centered[i];
  }
  const float rstd = 1.0f / std::sqrt(squares / static_cast<float>(dim) + epsilon);
  if (stat != nullptr) {
    stat[0] = mean;
    stat[1] = rstd;
  }
  const __m256 r = _mm256_set1_ps(rstd);
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(centered + i), r);
    Store8(out + i,
           _mm256_add_ps(_mm256_mul_ps(scaled, _mm256_loadu_ps(w + i)), _mm256_loadu_ps(b + i)));
  }
  for (int64_t i = body; i < dim; ++i) out[i] = static_cast<Out>(centered[i] * rstd * w[i] + b[i]);
}

// One row of LayerNorm's backward (below), dy float32 or bf16: xh and g are dim floats of scratch.
template <typename G>
KILN_AVX2 void LayerNormBackwardRowLanes(const float* xr, const G* dyr, const float* w, float mean,
                                         float rstd, int64_t dim, float* g, float* xh, float* dw,
                                         float* db, float* dxr) {
  const int64_t body = dim - dim % 8;
  const __m256 m = _mm256_set1_ps(mean), r = _mm256_set1_ps(rstd);
  __m256 sum_g = _mm256_setzero_ps(), sum_gx = _mm256_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 h = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + i), m), r);
    const __m256 dy = Load8(dyr + i);
    const __m256 gv = _mm256_mul_ps(dy, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(xh + i, h);
    _mm256_storeu_ps(g + i, gv);
    _mm256_storeu_ps(dw + i, _mm256_add_ps(_mm256_loadu_ps(dw + i), _mm256_mul_ps(dy, h)));
    _mm256_storeu_ps(db + i, _mm256_add_ps(_mm256_loadu_ps(db + i), dy));
    sum_g = _mm256_add_ps(sum_g, gv);
    sum_gx = _mm256_add_ps(sum_gx, _mm256_mul_ps(gv, h));
  }
  float total_g = LaneTotal(sum_g), total_gx = LaneTotal(sum_gx);
  for (int64_t i = body; i < dim; ++i) {
    const float dy = static_cast<float>(dyr[i]);
    xh[i] = (xr[i] - mean) * rstd;
    g[i] = dy * w[i];
    dw[i] += dy * xh[i];
    db[i] += dy;
    total_g += g[i];
    total_gx += g[i] * xh[i];
  }
  const float mean_g = total_g / static_cast<float>(dim);
  const float mean_gx = total_gx / static_cast<float>(dim);
  const __m256 mg = _mm256_set1_ps(mean_g), mgx = _mm256_set1_ps(mean_gx);
  for (int64_t i = 0; i < body; i += 8) {
    const __m256 centered_g = _mm256_sub_ps(_mm256_loadu_ps(g + i), mg);
    _mm256_storeu_ps(
        dxr + i,
        _mm256_mul_ps(r, _mm256_sub_ps(centered_g, _mm256_mul_ps(_mm256_loadu_ps(xh + i), mgx))));
  }
  for (int64_t i = body; i < dim; ++i) dxr[i] = rstd * (g[i] - mean_g - xh[i] * mean_gx);
}
#endif

template <typename G>
void LayerNormBackwardRow(const float* xr, const G* dyr, const float* w, float mean, float rstd,
                          int64_t dim, float* g, float* xh, float* dw, float* db, float* dxr) {
  for (int64_t i = 0; i < dim; ++i) {
    const float dy = static_cast<float>(dyr[i]);
    xh[i] = (xr[i] - mean) * rstd;
    g[i] = dy * w[i];
    dw[i] += dy * xh[i];
    db[i] += dy;
  }
  const float mean_g = LaneSum(dim, [g](int64_t i) { return g[i]; }) / static_cast<float>(dim);
  const float mean_gx =
      LaneSum(dim, [g, xh](int64_t i) { return g[i] * xh[i]; }) / static_cast<float>(dim);
  for (int64_t i = 0; i < dim; ++i) dxr[i] = rstd * (g[i] - mean_g - xh[i] * mean_gx);
}

// LayerNorm over float32 rows, written as Out (float32, or bf16 for the bf16 product that follows
// under autocast): mean and variance in two passes over the row (8 interleaved partial sums, a
// fixed order), y = (x - mean) rstd w + b in float32, rounded once to Out. Each row's mean and rstd
// go to `stats` [rows, 2] for the backward (when it is not null).
template <typename Out>
torch::Tensor LayerNormRows(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, double eps, float* stats) {
  torch::Tensor out = torch::empty_like(x, x.options().dtype(c10::CppTypeToScalarType<Out>::value));
  const int64_t dim = x.size(-1), rows = x.numel() / std::max<int64_t>(dim, 1);
  const float *in = x.data_ptr<float>(), *w = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
  Out* o = out.data_ptr<Out>();
  const float epsilon = static_cast<float>(eps);
  [[maybe_unused]] const bool lanes = UseLanes();
  ParallelFor(0, rows, kNormRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> centered(dim);
    for (int64_t r = begin; r < end; ++r) {
#ifdef KILN_BF16_LANES
      if (lanes) {
        LayerNormRowLanes(in + r * dim, w, b, dim, epsilon, centered.data(), o + r * dim,
                          stats ? stats + 2 * r : nullptr);
        continue;
      }
#endif
      LayerNormRow(in + r * dim, w, b, dim, epsilon, centered.data(), o + r * dim,
                   stats ? stats + 2 * r : nullptr);
    }
  });
  return out;
}

// With autograd: x float32 (the residual stream), the output bf16. With xh = (x - mean) rstd and
// g = dy w: dx = rstd (g - mean(g) - xh mean(g xh)), dw = the sum over rows of dy xh, db = of dy,
// the sums over fixed blocks of rows added in a fixed order (no dependence on the thread count).
class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
    const int64_t dim = x.size(-1);
    torch::Tensor stats = torch::empty({x.numel() / std::max<int64_t>(dim, 1), 2}, x.options());
    torch::Tensor y = LayerNormRows<c10::BFloat16>(x, weight, bias, eps, stats.data_ptr<float>());
    ctx->save_for_backward({x, weight, stats});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& stats = saved[2];
    // The output's gradient as it comes (bf16 from the product that read the norm), read in place.
    const torch::Tensor dy = grads[0].scalar_type() == torch::kBFloat16
                                 ? grads[0].contiguous()
                                 : grads[0].to(torch::kFloat32).contiguous();
    const int64_t dim = x.size(-1), rows = stats.size(0);
    const int64_t blocks = (rows + kNormRowGrain - 1) / kNormRowGrain;
    torch::Tensor dx = torch::empty_like(x);
    // Per block: dw's partial sums, then db's.
    torch::Tensor partial = torch::zeros({std::max<int64_t>(blocks, 1), 2, dim}, x.options());
    const float *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>(),
                *sp = stats.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *pp = partial.data_ptr<float>();
    auto run = [&](const auto* gp) {
      [[maybe_unused]] const bool lanes = UseLanes();
      ParallelFor(0, blocks, 1, [&](int64_t first, int64_t last) {
        std::vector<float> g(dim), xh(dim);
        for (int64_t block = first; block < last; ++block) {
          float* dw = pp + block * 2 * dim;
          float* db = dw + dim;
          const int64_t end = std::min(rows, (block + 1) * kNormRowGrain);
          for (int64_t r = block * kNormRowGrain; r < end; ++r) {
#ifdef KILN_BF16_LANES
            if (lanes) {
              LayerNormBackwardRowLanes(xp + r * dim, gp + r * dim, wp, sp[2 * r], sp[2 * r + 1],
                                        dim, g.data(), xh.data(), dw, db, dxp + r * dim);
              continue;
            }
#endif
            LayerNormBackwardRow(xp + r * dim, gp + r * dim, wp, sp[2 * r], sp[2 * r + 1], dim,
                                 g.data(), xh.data(), dw, db, dxp + r * dim);
          }
        }
      });
    };
    if (dy.scalar_type() == torch::kBFloat16) {
      run(dy.data_ptr<c10::BFloat16>());
    } else {
      run(dy.data_ptr<float>());
    }
    torch::Tensor sums = partial.sum(0);
    return {dx, sums[0], sums[1], torch::Tensor()};
  }
};

// One (B, T) row of x: n heads of hd, at `in` with heads `head_stride` apart; c and s the row's
// cos and sin. out[e] = x[e] c[e] + partner[e] s[e], partner = -x[e + hd/2] in the first half and
// x[e - hd/2] in the second, each product rounded to Out first. Out is the composite's result
// type: x's and cos's dtype, or float32 for bf16 x with float32 cos and sin (the products
// promoted).
template <typename In, typename Cs, typename Out>
void RotateRow(const In* in, int64_t head_stride, const Cs* c, const Cs* s, int64_t n, int64_t hd,
               Out* out) {
  const int64_t half = hd / 2;
  auto rounded = [](float v) { return static_cast<float>(static_cast<Out>(v)); };
  for (int64_t h = 0; h < n; ++h) {
    const In* x = in + h * head_stride;
    Out* dst = out + h * hd;
    for (int64_t e = 0; e < hd; ++e) {
      const float partner =
          e < half ? -static_cast<float>(x[e + half]) : static_cast<float>(x[e - half]);
      const float a = rounded(static_cast<float>(x[e]) * static_cast<float>(c[e]));
      const float r = rounded(partner * static_cast<float>(s[e]));
      dst[e] = static_cast<Out>(a + r);
    }
  }
}

// The rows' layout: x [B, T, n, hd] with its strides; cos and sin as [B, T, hd] strides (0 for a
// batch they are shared across).
struct RotaryLayout {
  int64_t batch, length, heads, hd;
  int64_t xb, xt, xh;  // x's strides
  int64_t cb, ct;      // cos's and sin's
};

RotaryLayout RotaryLayoutOf(const torch::Tensor& x, const torch::Tensor& cos) {
  RotaryLayout l{x.size(0),   x.size(1),   x.size(2), x.size(3), x.stride(0),
                 x.stride(1), x.stride(2), 0,         0};
  if (cos.dim() == 2) {
    l.ct = cos.stride(0);
  } else {
    l.cb = cos.size(0) == 1 ? 0 : cos.stride(0);
    l.ct = cos.stride(1);
  }
  return l;
}

template <typename In, typename Cs = In, typename Out = In>
torch::Tensor RotateLoop(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin) {
  const RotaryLayout l = RotaryLayoutOf(x, cos);
  torch::Tensor out = torch::empty({l.batch, l.length, l.heads, l.hd},
                                   x.options().dtype(c10::CppTypeToScalarType<Out>::value));
  const In* xp = x.data_ptr<In>();
  const Cs *cp = cos.data_ptr<Cs>(), *sp = sin.data_ptr<Cs>();
  Out* o = out.data_ptr<Out>();
  ParallelFor(0, l.batch * l.length, kNormRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row / l.length, j = row % l.length;
      const int64_t at = i * l.cb + j * l.ct;
      RotateRow(xp + i * l.xb + j * l.xt, l.xh, cp + at, sp + at, l.heads, l.hd,
                o + row * l.heads * l.hd);
    }
  });
  return out;
}

// The rotation's backward on one (B, T) row of n heads of hd, contiguous: d[e] = g[e] c[e] +
// g[e + hd/2] s[e + hd/2] in the first half and g[e] c[e] - g[e - hd/2] s[e - hd/2] in the second,
// in float32 (g widened), rounded to D once.
template <typename G, typename D>
void UnrotateRow(const G* g, const float* c, const float* s, int64_t n, int64_t hd, D* d) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < n; ++h, g += hd, d += hd) {
    for (int64_t e = 0; e < half; ++e) {
      d[e] = static_cast<D>(static_cast<float>(g[e]) * c[e] +
                            static_cast<float>(g[e + half]) * s[e + half]);
    }
    for (int64_t e = half; e < hd; ++e) {
      d[e] = static_cast<D>(static_cast<float>(g[e]) * c[e] -
                            static_cast<float>(g[e - half]) * s[e - half]);
    }
  }
}

// float32 cos and sin with autograd, x float32 or bf16 (the result float32, as the composite's).
// dx = dy * cos + RotateHalf^T(dy * sin): RotateHalf^T swaps the halves and negates the first, so
// dx[e] = dy[e] c[e] + dy[e + hd/2] s[e + hd/2] in the first half and dy[e] c[e] - dy[e - hd/2]
// s[e - hd/2] in the second, in float32, rounded to x's dtype once (the composite rounds each of
// the two terms to bf16 and adds them in bf16).
class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos, const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["bf16"] = x.scalar_type() == torch::kBFloat16;
    return x.scalar_type() == torch::kBFloat16
               ? RotateLoop<c10::BFloat16, float, float>(x, cos, sin)
               : RotateLoop<float>(x, cos, sin);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& cos = saved[0];
    const torch::Tensor& sin = saved[1];
    const torch::Tensor dy = grads[0].to(torch::kFloat32).contiguous();  // [B, T, n, hd]
    const RotaryLayout l = RotaryLayoutOf(dy, cos);
    torch::Tensor dx = torch::empty_like(dy);
    const float *gp = dy.data_ptr<float>(), *cp = cos.data_ptr<float>(),
                *sp = sin.data_ptr<float>();
    float* dp = dx.data_ptr<float>();
    ParallelFor(0, l.batch * l.length, kNormRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t at = row / l.length * l.cb + row % l.length * l.ct;
        UnrotateRow(gp + row * l.heads * l.hd, cp + at, sp + at, l.heads, l.hd,
                    dp + row * l.heads * l.hd);
      }
    });
    if (ctx->saved_data["bf16"].toBool()) dx = dx.to(torch::kBFloat16);
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

#ifdef KILN_BF16_LANES
// v, opaque to the optimizer: a product passed through it is not contracted with the sum that
// reads it into one FMA, so the lanes below round each product and then the sum, as the scalar
// rows (compiled without FMA) do.
KILN_AVX2 inline __m256 Opaque(__m256 v) {
  asm("" : "+x"(v));
  return v;
}

// RotateRow (float32 cos, sin and result) on AVX2 lanes, for n contiguous heads of hd (a multiple
// of 16): the same bits. First half x c - x[e + hd/2] s, second half x c + x[e - hd/2] s. With
// kBack, UnrotateRow's transpose instead (the gradient's rotation back, rounded to Out once):
// first half g c + g[e + hd/2] s[e + hd/2], second half g c - g[e - hd/2] s[e - hd/2].
template <bool kBack, typename In, typename Out>
KILN_AVX2 void RotateHeadsLanes(const In* x, const float* c, const float* s, int64_t n, int64_t hd,
                                Out* out) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < n; ++h, x += hd, out += hd) {
    for (int64_t e = 0; e < half; e += 8) {
      const __m256 lo = Load8(x + e), hi = Load8(x + e + half);
      const __m256 lo_c = Opaque(_mm256_mul_ps(lo, Load8(c + e)));
      const __m256 hi_c = Opaque(_mm256_mul_ps(hi, Load8(c + e + half)));
      const __m256 hi_s = Opaque(_mm256_mul_ps(hi, Load8(s + (kBack ? e + half : e))));
      const __m256 lo_s = Opaque(_mm256_mul_ps(lo, Load8(s + (kBack ? e : e + half))));
      Store8(out + e, kBack ? _mm256_add_ps(lo_c, hi_s) : _mm256_sub_ps(lo_c, hi_s));
      Store8(out + e + half, kBack ? _mm256_sub_ps(hi_c, lo_s) : _mm256_add_ps(hi_c, lo_s));
    }
  }
}
#endif

// RotateQkv's loop: q [B, T, heads hd], k and v [B, T, kv hd] of T (float32, or bf16 under
// autocast), contiguous; float32 cos and sin [T, hd]. Each row of the result
// [B, T, (heads + 2 kv) hd] is q's heads rotated, k's rotated, then v's, in T: the rotation
// computed as RotateLoop<T, float, float> computes it and rounded to T once.
struct QkvLayout {
  int64_t rows, length, heads, kv, hd;
};

template <typename T>
torch::Tensor RotateQkvLoop(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& cos, const torch::Tensor& sin,
                            const QkvLayout& l) {
  const int64_t width = (l.heads + 2 * l.kv) * l.hd;
  torch::Tensor out = torch::empty({q.size(0), l.length, width}, v.options());
  const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  T* op = out.data_ptr<T>();
  [[maybe_unused]] const bool lanes = UseLanes() && l.hd % 16 == 0;
  auto rotate = [&](const T* x, const float* c, const float* s, int64_t n, float* r) {
#ifdef KILN_BF16_LANES
    if (lanes) return RotateHeadsLanes<false>(x, c, s, n, l.hd, r);
#endif
    RotateRow(x, l.hd, c, s, n, l.hd, r);
  };
  ParallelFor(0, l.rows, kNormRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> rotated(std::is_same_v<T, float> ? 0 : (l.heads + l.kv) * l.hd);
    for (int64_t row = begin; row < end; ++row) {
      const float* c = cp + row % l.length * l.hd;
      const float* s = sp + row % l.length * l.hd;
      T* o = op + row * width;
      float* r = std::is_same_v<T, float> ? reinterpret_cast<float*>(o) : rotated.data();
      rotate(qp + row * l.heads * l.hd, c, s, l.heads, r);
      rotate(kp + row * l.kv * l.hd, c, s, l.kv, r + l.heads * l.hd);
      if constexpr (!std::is_same_v<T, float>) {
        for (int64_t e = 0; e < (l.heads + l.kv) * l.hd; ++e) o[e] = static_cast<T>(r[e]);
      }
      std::copy(vp + row * l.kv * l.hd, vp + (row + 1) * l.kv * l.hd, o + (l.heads + l.kv) * l.hd);
    }
  });
  return out;
}

// dq and dk: the rows' rotation undone on the gradient's q and k heads (T, as the gradient); dv:
// the gradient's v heads as they are (a view).
template <typename T>
std::pair<torch::Tensor, torch::Tensor> UnrotateQk(const torch::Tensor& g, const torch::Tensor& cos,
                                                   const torch::Tensor& sin, const QkvLayout& l) {
  const int64_t width = (l.heads + 2 * l.kv) * l.hd;
  torch::Tensor dq = torch::empty({g.size(0), l.length, l.heads * l.hd}, g.options());
  torch::Tensor dk = torch::empty({g.size(0), l.length, l.kv * l.hd}, g.options());
  const T* gp = g.data_ptr<T>();
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  T *qp = dq.data_ptr<T>(), *kp = dk.data_ptr<T>();
  [[maybe_unused]] const bool lanes = UseLanes() && l.hd % 16 == 0;
  auto unrotate = [&](const T* g, const float* c, const float* s, int64_t n, T* d) {
#ifdef KILN_BF16_LANES
    if (lanes) return RotateHeadsLanes<true>(g, c, s, n, l.hd, d);
#endif
    UnrotateRow(g, c, s, n, l.hd, d);
  };
  ParallelFor(0, l.rows, kNormRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* c = cp + row % l.length * l.hd;
      const float* s = sp + row % l.length * l.hd;
      const T* gr = gp + row * width;
      unrotate(gr, c, s, l.heads, qp + row * l.heads * l.hd);
      unrotate(gr + l.heads * l.hd, c, s, l.kv, kp + row * l.kv * l.hd);
    }
  });
  return {dq, dk};
}

class RotaryQkvFunction : public torch::autograd::Function<RotaryQkvFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                               int64_t kv_heads) {
    const QkvLayout l{q.size(0) * q.size(1), q.size(1), heads, kv_heads, cos.size(1)};
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    if (q.scalar_type() == torch::kFloat32) return RotateQkvLoop<float>(q, k, v, cos, sin, l);
    return RotateQkvLoop<c10::BFloat16>(q, k, v, cos, sin, l);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor g = grads[0].contiguous();
    const QkvLayout l{g.size(0) * g.size(1), g.size(1), ctx->saved_data["heads"].toInt(),
                      ctx->saved_data["kv_heads"].toInt(), saved[0].size(1)};
    auto [dq, dk] = g.scalar_type() == torch::kFloat32
                        ? UnrotateQk<float>(g, saved[0], saved[1], l)
                        : UnrotateQk<c10::BFloat16>(g, saved[0], saved[1], l);
    torch::Tensor dv = g.narrow(2, (l.heads + l.kv) * l.hd, l.kv * l.hd);
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor RotateHalf(const torch::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}

torch::Tensor RmsNormalize(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool rows = x.device().is_cpu() && weight.device().is_cpu() && x.is_contiguous() &&
                    x.dim() >= 1 && x.layout() == torch::kStrided &&
                    weight.scalar_type() == x.scalar_type() && weight.dim() == 1 &&
                    weight.size(0) == x.size(-1) && !torch::jit::tracer::isTracing();
  const bool recording =
      torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  if (rows && !recording) {
    if (x.scalar_type() == torch::kFloat32) return NormRows<float>(x, weight, eps, nullptr);
    if (x.scalar_type() == torch::kBFloat16)
      return NormRows<c10::BFloat16>(x, weight, eps, nullptr);
  }
  if (rows && recording && x.scalar_type() == torch::kFloat32) {
    return RmsNormFunction::apply(x, weight, eps);
  }
  torch::Tensor h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * h.to(x.scalar_type());
}

torch::Tensor LayerNormToBf16(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps) {
  const int64_t dim = x.dim() >= 1 ? x.size(-1) : 0;
  const bool rows = x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
                    x.is_contiguous() && x.dim() >= 1 && dim > 0 && x.layout() == torch::kStrided &&
                    weight.defined() && bias.defined() && weight.device().is_cpu() &&
                    bias.device().is_cpu() && weight.scalar_type() == torch::kFloat32 &&
                    bias.scalar_type() == torch::kFloat32 && weight.dim() == 1 && bias.dim() == 1 &&
                    weight.size(0) == dim && bias.size(0) == dim && weight.is_contiguous() &&
                    bias.is_contiguous() && !torch::jit::tracer::isTracing();
  if (!rows) {
    // What autocast runs: the norm in float32 whatever its inputs' dtypes, then the cast.
    auto f32 = [](const torch::Tensor& t) { return t.defined() ? t.to(torch::kFloat32) : t; };
    return torch::layer_norm(f32(x), {dim}, f32(weight), f32(bias), eps).to(torch::kBFloat16);
  }
  const bool recording = torch::GradMode::is_enabled() &&
                         (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  if (recording) return LayerNormFunction::apply(x, weight, bias, eps);
  return LayerNormRows<c10::BFloat16>(x, weight, bias, eps, /*stats=*/nullptr);
}

torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto dtype = x.scalar_type();
  const bool shaped = x.dim() == 4 && x.size(3) % 2 == 0 && x.stride(3) == 1 &&
                      cos.sizes() == sin.sizes() && cos.strides() == sin.strides() &&
                      ((cos.dim() == 2 && cos.size(0) == x.size(1)) ||
                       (cos.dim() == 4 && cos.size(1) == x.size(1) && cos.size(2) == 1 &&
                        (cos.size(0) == x.size(0) || cos.size(0) == 1))) &&
                      cos.size(-1) == x.size(3) && cos.stride(-1) == 1;
  const bool loop = shaped && x.device().is_cpu() && cos.device().is_cpu() &&
                    x.layout() == torch::kStrided && sin.scalar_type() == cos.scalar_type() &&
                    !torch::jit::tracer::isTracing();
  const auto tables = cos.scalar_type();
  const bool recording = torch::GradMode::is_enabled() && x.requires_grad();
  if (loop && !recording && tables == dtype &&
      (dtype == torch::kFloat32 || dtype == torch::kBFloat16)) {
    return dtype == torch::kFloat32 ? RotateLoop<float>(x, cos, sin)
                                    : RotateLoop<c10::BFloat16>(x, cos, sin);
  }
  // float32 tables with float32 x, or with bf16 x (a projection under autocast: the composite's
  // float32 result), with autograd or without.
  if (loop && tables == torch::kFloat32 &&
      (dtype == torch::kFloat32 || dtype == torch::kBFloat16) && !cos.requires_grad() &&
      !sin.requires_grad()) {
    return recording ? RotaryFunction::apply(x, cos, sin)
                     : RotateLoop<c10::BFloat16, float, float>(x, cos, sin);
  }
  // The composite: cos and sin broadcast over the heads.
  torch::Tensor c = cos.dim() == 2 ? cos.unsqueeze(1) : cos;
  torch::Tensor s = sin.dim() == 2 ? sin.unsqueeze(1) : sin;
  return x * c + RotateHalf(x) * s;
}

torch::Tensor RotateQkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                        int64_t kv_heads) {
  const auto out = v.scalar_type();
  const bool types = q.scalar_type() == out && k.scalar_type() == out &&
                     (out == torch::kFloat32 || out == torch::kBFloat16) &&
                     cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32;
  const bool shaped = q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && cos.dim() == 2 && heads > 0 &&
                      kv_heads > 0 && cos.size(1) % 2 == 0 && q.size(2) == heads * cos.size(1) &&
                      k.size(2) == kv_heads * cos.size(1) && v.sizes() == k.sizes() &&
                      q.size(0) == k.size(0) && q.size(1) == k.size(1) &&
                      cos.size(0) == q.size(1) && sin.sizes() == cos.sizes();
  const bool loop = types && shaped && q.device().is_cpu() && k.device().is_cpu() &&
                    v.device().is_cpu() && cos.device().is_cpu() && q.is_contiguous() &&
                    k.is_contiguous() && v.is_contiguous() && cos.is_contiguous() &&
                    sin.is_contiguous() && !cos.requires_grad() && !sin.requires_grad() &&
                    !torch::jit::tracer::isTracing();
  if (loop) return RotaryQkvFunction::apply(q, k, v, cos, sin, heads, kv_heads);
  auto rotated = [&](const torch::Tensor& p, int64_t n) {
    return Rotate(p.view({p.size(0), p.size(1), n, cos.size(-1)}), cos, sin)
        .to(out)
        .reshape({p.size(0), p.size(1), n * cos.size(-1)});
  };
  return torch::cat({rotated(q, heads), rotated(k, kv_heads), v}, -1);
}

}  // namespace kiln
