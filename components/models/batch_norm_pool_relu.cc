#include "components/models/batch_norm_pool_relu.h"

#include <torch/csrc/jit/frontend/tracer.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "components/common/parallel.h"
#include "components/models/bf16_lanes.h"

namespace kiln {
// Named, so that the unity build's other files' anonymous-namespace helpers do not clash.
namespace batch_norm_pool_relu {
namespace {

torch::Tensor Composed(const torch::Tensor& x, torch::nn::BatchNorm2d& bn) {
  // ReLU after the pooling, in place: relu and max commute (both the values and the gradients are
  // bitwise those of pool(relu(x))), and the ReLU then touches a quarter of the values.
  return torch::max_pool2d(bn->forward(x), {2, 2}, {2, 2}, {0, 0}).relu_();
}

#ifdef KILN_BF16_LANES
// AVX-512 with its bf16 conversions (VCVTNEPS2BF16: round to nearest even, as c10::BFloat16, in one
// instruction) on 8-lane registers: the kernel is for the CPUs where bf16 pays.
#define KILN_AVX512_BF16 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")))
using bf16::Load8;
using c10::BFloat16;

constexpr int64_t kLanes = 8;
// Rows (pixels, each C values) per statistics block: summed in float32 from a per-channel pivot,
// then the blocks in double, in a fixed order, so the result does not depend on the threads.
constexpr int64_t kBlock = 512;
constexpr int kNoGradient = 4;  // the code of an output the ReLU zeroed (or NaN)

bool HasAvx512Bf16() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bf16");
  return yes;
}

KILN_AVX512_BF16 inline void StoreBf16(BFloat16* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(v)));
}

// Channel groups of 8 summed at once, in registers, per pass over a block's rows.
constexpr int kGroups = 4;

// Per-channel sum and sum of squares of (x - pivot) over rows [begin, end) of a rows x C matrix,
// channels [j0, j0 + 8 G), added to s1, s2 (float32, C each).
template <int G>
KILN_AVX512_BF16 void SumChunk(const BFloat16* x, int64_t c, int64_t j0, int64_t begin, int64_t end,
                               const float* pivot, float* s1, float* s2) {
  __m256 a1[G], a2[G], p[G];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    a1[i] = a2[i] = _mm256_setzero_ps();
    p[i] = _mm256_loadu_ps(pivot + j0 + i * kLanes);
  }
  for (int64_t r = begin; r < end; ++r) {
    const BFloat16* row = x + r * c + j0;
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
      const __m256 v = _mm256_sub_ps(Load8(row + i * kLanes), p[i]);
      a1[i] = _mm256_add_ps(a1[i], v);
      a2[i] = _mm256_fmadd_ps(v, v, a2[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    _mm256_storeu_ps(s1 + j0 + i * kLanes, a1[i]);
    _mm256_storeu_ps(s2 + j0 + i * kLanes, a2[i]);
  }
}

// Per-channel sums of the BatchNorm output's gradient dy (g at the winners, 0 elsewhere) and of
// dy (x - mean), over output rows [begin, end), channels [j0, j0 + 8 G).
template <int G>
KILN_AVX512_BF16 void GradientSumChunk(const BFloat16* g, const uint8_t* code, const BFloat16* xsel,
                                       const float* mean, int64_t c, int64_t j0, int64_t begin,
                                       int64_t end, float* s1, float* s2) {
  __m256 a1[G], a2[G], m[G];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    a1[i] = a2[i] = _mm256_setzero_ps();
    m[i] = _mm256_loadu_ps(mean + j0 + i * kLanes);
  }
  const __m256i no_gradient = _mm256_set1_epi32(kNoGradient);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t at = r * c + j0;
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
      const int64_t k = at + i * kLanes;
      const __m256i codes =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(code + k)));
      const __m256 dy =
          _mm256_maskz_mov_ps(_mm256_cmpneq_epi32_mask(codes, no_gradient), Load8(g + k));
      a1[i] = _mm256_add_ps(a1[i], dy);
      a2[i] = _mm256_fmadd_ps(dy, _mm256_sub_ps(Load8(xsel + k), m[i]), a2[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    _mm256_storeu_ps(s1 + j0 + i * kLanes, a1[i]);
    _mm256_storeu_ps(s2 + j0 + i * kLanes, a2[i]);
  }
}

// Calls chunk.template operator()<G>(j0) over the channels, G groups of 8 at a time.
template <typename Chunk>
void ForChunks(int64_t c, const Chunk& chunk) {
  for (int64_t j0 = 0; j0 < c; j0 += kGroups * kLanes) {
    switch (std::min<int64_t>(kGroups, (c - j0) / kLanes)) {
      case 1: chunk(std::integral_constant<int, 1>(), j0); break;
      case 2: chunk(std::integral_constant<int, 2>(), j0); break;
      case 3: chunk(std::integral_constant<int, 3>(), j0); break;
      default: chunk(std::integral_constant<int, 4>(), j0); break;
    }
  }
}

struct Shape {
  int64_t n, c, h, w;
  int64_t ho() const { return h / 2; }
  int64_t wo() const { return w / 2; }
  int64_t rows() const { return n * h * w; }            // input pixels
  int64_t out_rows() const { return n * ho() * wo(); }  // output pixels
};

// Sums over fixed blocks of `rows` rows, the blocks in parallel, then in order in double.
template <typename BlockSum>
void BlockedSums(int64_t rows, int64_t c, const BlockSum& block_sum, std::vector<double>& t1,
                 std::vector<double>& t2) {
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  std::vector<float> p1(blocks * c), p2(blocks * c);
  ParallelFor(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      block_sum(b * kBlock, std::min(rows, (b + 1) * kBlock), p1.data() + b * c, p2.data() + b * c);
    }
  });
  t1.assign(c, 0.0);
  t2.assign(c, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < c; ++j) {
      t1[j] += p1[b * c + j];
      t2[j] += p2[b * c + j];
    }
  }
}

// Output rows (n, oh) [begin, end): y = x a + b for the 2x2 window (ATen's channels-last
// BatchNorm: a = w invstd, b = bias - mean a, a product then a sum), the first maximum (a NaN
// wins, as in max_pool2d; x a orders the window as y does), then the ReLU. Keeps the winner's
// input value and its position (kNoGradient where the output is not > 0).
KILN_AVX512_BF16 void ForwardRows(const Shape& s, const BFloat16* x, const float* a, const float* b,
                                  BFloat16* y, uint8_t* code, BFloat16* xsel, int64_t begin,
                                  int64_t end) {
  const int64_t c = s.c, wo = s.wo();
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t row = begin; row < end; ++row) {
    const int64_t n = row / s.ho(), oh = row % s.ho();
    for (int64_t ow = 0; ow < wo; ++ow) {
      const int64_t in = ((n * s.h + 2 * oh) * s.w + 2 * ow) * c;
      const BFloat16* window[4] = {x + in, x + in + c, x + in + s.w * c, x + in + s.w * c + c};
      const int64_t out = (row * wo + ow) * c;
      for (int64_t j = 0; j < c; j += kLanes) {
        const __m256 av = _mm256_loadu_ps(a + j);
        __m256 xs = Load8(window[0] + j);
        __m256 m = _mm256_mul_ps(xs, av);
        __m256i idx = _mm256_setzero_si256();
#pragma GCC unroll 3
        for (int k = 1; k < 4; ++k) {
          const __m256 xk = Load8(window[k] + j);
          const __m256 yk = _mm256_mul_ps(xk, av);
          const __mmask8 wins =
              _mm256_cmp_ps_mask(yk, m, _CMP_GT_OQ) | _mm256_cmp_ps_mask(yk, yk, _CMP_UNORD_Q);
          m = _mm256_mask_blend_ps(wins, m, yk);
          xs = _mm256_mask_blend_ps(wins, xs, xk);
          idx = _mm256_mask_blend_epi32(wins, idx, _mm256_set1_epi32(k));
        }
        m = _mm256_add_ps(m, _mm256_loadu_ps(b + j));
        // ReLU: NaN stays NaN (and passes no gradient, as threshold_backward's result > 0).
        StoreBf16(y + out + j,
                  _mm256_mask_blend_ps(_mm256_cmp_ps_mask(m, zero, _CMP_LE_OQ), m, zero));
        idx = _mm256_mask_blend_epi32(_mm256_cmp_ps_mask(m, zero, _CMP_GT_OQ),
                                      _mm256_set1_epi32(kNoGradient), idx);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(code + out + j), _mm256_cvtepi32_epi8(idx));
        StoreBf16(xsel + out + j, xs);
      }
    }
  }
}

// dx = k1 dy + k2 x + k3 over the windows of output rows (n, oh) [begin, end).
KILN_AVX512_BF16 void BackwardRows(const Shape& s, const BFloat16* x, const BFloat16* g,
                                   const uint8_t* code, const float* k1, const float* k2,
                                   const float* k3, BFloat16* dx, int64_t begin, int64_t end) {
  const int64_t c = s.c, wo = s.wo();
  for (int64_t row = begin; row < end; ++row) {
    const int64_t n = row / s.ho(), oh = row % s.ho();
    for (int64_t ow = 0; ow < wo; ++ow) {
      const int64_t in = ((n * s.h + 2 * oh) * s.w + 2 * ow) * c;
      const int64_t window[4] = {in, in + c, in + s.w * c, in + s.w * c + c};
      const int64_t out = (row * wo + ow) * c;
      for (int64_t j = 0; j < c; j += kLanes) {
        const __m256 k2v = _mm256_loadu_ps(k2 + j), k3v = _mm256_loadu_ps(k3 + j);
        const __m256 scaled = _mm256_mul_ps(Load8(g + out + j), _mm256_loadu_ps(k1 + j));
        const __m256i codes =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(code + out + j)));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __mmask8 mine = _mm256_cmpeq_epi32_mask(codes, _mm256_set1_epi32(k));
          const __m256 base = _mm256_fmadd_ps(k2v, Load8(x + window[k] + j), k3v);
          StoreBf16(dx + window[k] + j, _mm256_mask_add_ps(base, mine, base, scaled));
        }
      }
    }
  }
}

int64_t RowGrain(const Shape& s) { return std::max<int64_t>(1, (1 << 14) / (4 * s.wo() * s.c)); }

Shape ShapeOf(const torch::Tensor& x) { return {x.size(0), x.size(1), x.size(2), x.size(3)}; }

class BatchNormPoolReluFunction : public torch::autograd::Function<BatchNormPoolReluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps) {
    const Shape s = ShapeOf(x);
    const BFloat16* xp = x.data_ptr<BFloat16>();
    const int64_t c = s.c, rows = s.rows();

    // Statistics: sums of (x - pivot), the pivot being the first pixel's value, so that a mean
    // far from 0 costs no precision in the variance.
    std::vector<float> pivot(c);
    for (int64_t j = 0; j < c; ++j) pivot[j] = static_cast<float>(xp[j]);
    std::vector<double> t1, t2;
    BlockedSums(
        rows, c,
        [&](int64_t begin, int64_t end, float* s1, float* s2) {
          ForChunks(c, [&](auto groups, int64_t j0) {
            SumChunk<decltype(groups)::value>(xp, c, j0, begin, end, pivot.data(), s1, s2);
          });
        },
        t1, t2);
    torch::Tensor mean = torch::empty({c}, weight.options());
    torch::Tensor invstd = torch::empty({c}, weight.options());
    float *mp = mean.data_ptr<float>(), *ip = invstd.data_ptr<float>();
    float *rm = running_mean.data_ptr<float>(), *rv = running_var.data_ptr<float>();
    const float *wp = weight.data_ptr<float>(), *bp = bias.data_ptr<float>();
    std::vector<float> a(c), b(c);
    for (int64_t j = 0; j < c; ++j) {
      const double centred_mean = t1[j] / rows;
      // ATen's batch_norm_cpu_update_stats_template from here: mean and the sum of squared
      // deviations in float32, the updates' arithmetic as written there.
      const float m = static_cast<float>(pivot[j] + centred_mean);
      const float var_sum = static_cast<float>(std::max(0.0, t2[j] - t1[j] * centred_mean));
      mp[j] = m;
      ip[j] = 1.0f / std::sqrt(var_sum / rows + static_cast<float>(eps));
      rm[j] = momentum * m + (1 - momentum) * rm[j];
      rv[j] = momentum * (var_sum / (rows - 1)) + (1 - momentum) * rv[j];
      a[j] = ip[j] * wp[j];
      b[j] = bp[j] - mp[j] * a[j];
    }

    torch::Tensor y = torch::empty({s.n, c, s.ho(), s.wo()},
                                   x.options().memory_format(at::MemoryFormat::ChannelsLast));
    torch::Tensor code = torch::empty({s.out_rows() * c}, x.options().dtype(torch::kUInt8));
    torch::Tensor xsel = torch::empty({s.out_rows() * c}, x.options());
    BFloat16 *yp = y.data_ptr<BFloat16>(), *sp = xsel.data_ptr<BFloat16>();
    uint8_t* cp = code.data_ptr<uint8_t>();
    ParallelFor(0, s.n * s.ho(), RowGrain(s), [&](int64_t begin, int64_t end) {
      ForwardRows(s, xp, a.data(), b.data(), yp, cp, sp, begin, end);
    });
    ctx->save_for_backward({x, weight, code, xsel, mean, invstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &code = saved[2], &xsel = saved[3],
                        &mean = saved[4], &invstd = saved[5];
    const Shape s = ShapeOf(x);
    const int64_t c = s.c, rows = s.rows();
    torch::Tensor g = grads[0].to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
    const BFloat16 *gp = g.data_ptr<BFloat16>(), *sp = xsel.data_ptr<BFloat16>();
    const uint8_t* cp = code.data_ptr<uint8_t>();
    const float *mp = mean.data_ptr<float>(), *ip = invstd.data_ptr<float>(),
                *wp = weight.data_ptr<float>();
    std::vector<double> sum_dy, dot;
    BlockedSums(
        s.out_rows(), c,
        [&](int64_t begin, int64_t end, float* s1, float* s2) {
          ForChunks(c, [&](auto groups, int64_t j0) {
            GradientSumChunk<decltype(groups)::value>(gp, cp, sp, mp, c, j0, begin, end, s1, s2);
          });
        },
        sum_dy, dot);

    // ATen's channels-last BatchNorm backward: dx = (dy - (x - mean) p - sum_dy / M) invstd w,
    // p = dot invstd^2 / M; here as k1 dy + k2 x + k3.
    torch::Tensor grad_weight = torch::empty({c}, weight.options());
    torch::Tensor grad_bias = torch::empty({c}, weight.options());
    float *gw = grad_weight.data_ptr<float>(), *gb = grad_bias.data_ptr<float>();
    std::vector<float> k1(c), k2(c), k3(c);
    for (int64_t j = 0; j < c; ++j) {
      const double scale = static_cast<double>(ip[j]) * wp[j];
      const double p = dot[j] * ip[j] * ip[j] / rows;
      k1[j] = static_cast<float>(scale);
      k2[j] = static_cast<float>(-p * scale);
      k3[j] = static_cast<float>((p * mp[j] - sum_dy[j] / rows) * scale);
      gw[j] = static_cast<float>(dot[j] * ip[j]);
      gb[j] = static_cast<float>(sum_dy[j]);
    }
    torch::Tensor dx =
        torch::empty_like(x, x.options().memory_format(at::MemoryFormat::ChannelsLast));
    const BFloat16* xp = x.data_ptr<BFloat16>();
    BFloat16* dp = dx.data_ptr<BFloat16>();
    ParallelFor(0, s.n * s.ho(), RowGrain(s), [&](int64_t begin, int64_t end) {
      BackwardRows(s, xp, gp, cp, k1.data(), k2.data(), k3.data(), dp, begin, end);
    });
    return {dx,
            grad_weight,
            grad_bias,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

bool IsFloat32Vector(const torch::Tensor& t, int64_t c) {
  return t.defined() && t.scalar_type() == torch::kFloat32 && t.dim() == 1 && t.size(0) == c &&
         t.is_contiguous() && t.device().is_cpu();
}
#endif  // KILN_BF16_LANES

}  // namespace
}  // namespace batch_norm_pool_relu

bool BatchNormPoolReluIsFused(const torch::Tensor& x, const torch::nn::BatchNorm2d& bn) {
#ifdef KILN_BF16_LANES
  using namespace batch_norm_pool_relu;  // NOLINT(google-build-using-namespace)
  if (!x.device().is_cpu() || x.layout() != torch::kStrided ||
      x.scalar_type() != torch::kBFloat16 || x.dim() != 4 ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    return false;
  }
  const int64_t c = x.size(1);
  const auto& o = bn->options;
  return c % kLanes == 0 && x.size(2) % 2 == 0 && x.size(3) % 2 == 0 &&
         x.size(0) * x.size(2) * x.size(3) > 1 && bn->is_training() && o.affine() &&
         o.track_running_stats() && IsFloat32Vector(bn->weight, c) &&
         IsFloat32Vector(bn->bias, c) && IsFloat32Vector(bn->running_mean, c) &&
         IsFloat32Vector(bn->running_var, c) && HasAvx512Bf16() && !torch::jit::tracer::isTracing();
#else
  return false;
#endif
}

torch::Tensor BatchNormPoolRelu(const torch::Tensor& x, torch::nn::BatchNorm2d& bn) {
#ifdef KILN_BF16_LANES
  using batch_norm_pool_relu::BatchNormPoolReluFunction;
  if (BatchNormPoolReluIsFused(x, bn)) {
    // BatchNorm2d::forward's bookkeeping.
    double momentum = bn->options.momentum().value_or(0.0);
    if (bn->num_batches_tracked.defined()) {
      bn->num_batches_tracked += 1;
      if (!bn->options.momentum().has_value()) {
        momentum = 1.0 / bn->num_batches_tracked.item<double>();
      }
    }
    return BatchNormPoolReluFunction::apply(x, bn->weight, bn->bias, bn->running_mean,
                                            bn->running_var, momentum, bn->options.eps());
  }
#endif
  return batch_norm_pool_relu::Composed(x, bn);
}

}  // namespace kiln
