#include "components/models/gelu_tanh.h"

#include <torch/csrc/jit/frontend/tracer.h>

#include <algorithm>

#include "components/common/parallel.h"
#include "components/models/bf16_lanes.h"

#ifdef KILN_BF16_LANES
#define KILN_GELU_KERNEL 1
#endif

namespace kiln {
#ifdef KILN_GELU_KERNEL
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kLanes = 8;
constexpr int64_t kGrain = 1 << 14;  // elements per parallel task

using bf16::Load8;
using bf16::Store8;

// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2 |u|), |u| capped at 9 (tanh is 1 in float from
// there). NaN stays NaN.
KILN_AVX2 inline __m256 Tanh8(__m256 u) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_and_ps(u, sign_bit);
  const __m256 v = _mm256_min_ps(_mm256_set1_ps(9.0f), _mm256_andnot_ps(sign_bit, u));
  const __m256 e = bf16::Exp8(_mm256_mul_ps(v, _mm256_set1_ps(-2.0f)));
  return _mm256_or_ps(_mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e)), sign);
}

// y = 0.5 x (1 + t), t = tanh(sqrt(2/pi) (x + 0.044715 x^3)). When `slope` is not null, the
// derivative dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) goes there, in
// float32 whatever x is, so that the backward is one product and reads neither x nor t.
template <typename T>
KILN_AVX2 inline void Forward8(const T* x, T* y, float* slope) {
  const __m256 xv = Load8(x), half = _mm256_set1_ps(0.5f);
  const __m256 u = _mm256_mul_ps(
      xv, _mm256_fmadd_ps(_mm256_mul_ps(xv, xv), _mm256_set1_ps(kSqrt2OverPi * kCubic),
                          _mm256_set1_ps(kSqrt2OverPi)));
  const __m256 th = Tanh8(u);
  const __m256 half_x = _mm256_mul_ps(xv, half);
  Store8(y, _mm256_fmadd_ps(half_x, th, half_x));
  if (slope == nullptr) return;
  const __m256 du =
      _mm256_fmadd_ps(_mm256_mul_ps(xv, xv), _mm256_set1_ps(3 * kSqrt2OverPi * kCubic),
                      _mm256_set1_ps(kSqrt2OverPi));
  // 1 - t^2 as (1 - t)(1 + t): near t = +-1 the factor that matters is computed exactly.
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sech2 = _mm256_mul_ps(_mm256_sub_ps(one, th), _mm256_add_ps(one, th));
  _mm256_storeu_ps(
      slope, _mm256_fmadd_ps(_mm256_mul_ps(half_x, sech2), du, _mm256_fmadd_ps(half, th, half)));
}

// dx = g dy/dx.
template <typename T>
KILN_AVX2 inline void Backward8(const T* g, const float* slope, T* dx) {
  Store8(dx, _mm256_mul_ps(Load8(g), _mm256_loadu_ps(slope)));
}

// The last n % 8 elements go through the same 8-lane code on a padded copy, so every element's
// value is the same whatever the split into parallel tasks.
template <typename T>
KILN_AVX2 void ForwardRange(const T* x, T* y, float* slope, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Forward8(x + i, y + i, slope ? slope + i : nullptr);
  if (i == n) return;
  T bx[kLanes] = {}, by[kLanes];
  float bs[kLanes];
  std::copy(x + i, x + n, bx);
  Forward8(bx, by, bs);
  std::copy(by, by + (n - i), y + i);
  if (slope != nullptr) std::copy(bs, bs + (n - i), slope + i);
}

template <typename T>
KILN_AVX2 void BackwardRange(const T* g, const float* slope, T* dx, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Backward8(g + i, slope + i, dx + i);
  if (i == n) return;
  T bg[kLanes] = {}, bd[kLanes];
  float bs[kLanes] = {};
  std::copy(g + i, g + n, bg);
  std::copy(slope + i, slope + n, bs);
  Backward8(bg, bs, bd);
  std::copy(bd, bd + (n - i), dx + i);
}

template <typename T>
void RunForward(const torch::Tensor& x, torch::Tensor& y, float* tp) {
  const T* xp = x.data_ptr<T>();
  T* yp = y.data_ptr<T>();
  ParallelFor(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    ForwardRange(xp + begin, yp + begin, tp ? tp + begin : nullptr, end - begin);
  });
}

template <typename T>
void RunBackward(const torch::Tensor& g, const float* sp, torch::Tensor& dx) {
  const T* gp = g.data_ptr<T>();
  T* dp = dx.data_ptr<T>();
  ParallelFor(0, g.numel(), kGrain, [&](int64_t begin, int64_t end) {
    BackwardRange(gp + begin, sp + begin, dp + begin, end - begin);
  });
}

// float32 or bfloat16 x (and y, dx); the kept tanh is float32 either way.
class GeluTanhFunction : public torch::autograd::Function<GeluTanhFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input) {
    torch::Tensor x = input.contiguous();
    const bool keep = input.requires_grad();
    torch::Tensor y = torch::empty_like(x);
    // The derivative at each element (float32): all the backward reads besides the gradient.
    torch::Tensor slope =
        keep ? torch::empty_like(x, x.options().dtype(torch::kFloat32)) : torch::Tensor();
    float* sp = keep ? slope.data_ptr<float>() : nullptr;
    const bool bf16 = x.scalar_type() == torch::kBFloat16;
    if (bf16) {
      RunForward<c10::BFloat16>(x, y, sp);
    } else {
      RunForward<float>(x, y, sp);
    }
    if (keep) {
      ctx->save_for_backward({slope});
      ctx->saved_data["bf16"] = bf16;
    }
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor slope = ctx->get_saved_variables()[0];
    const bool bf16 = ctx->saved_data["bf16"].toBool();
    torch::Tensor g = grads[0].to(bf16 ? torch::kBFloat16 : torch::kFloat32).contiguous();
    torch::Tensor dx = torch::empty_like(g);
    if (bf16) {
      RunBackward<c10::BFloat16>(g, slope.data_ptr<float>(), dx);
    } else {
      RunBackward<float>(g, slope.data_ptr<float>(), dx);
    }
    return {dx};
  }
};

// sigmoid(g) = 1 / (1 + exp(-g)), -g capped at 88 (exp stays finite; sigmoid is 0 in float there).
KILN_AVX2 inline __m256 Sigmoid8(__m256 g) {
  const __m256 e =
      bf16::Exp8(_mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_sub_ps(_mm256_setzero_ps(), g)));
  return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// y = silu(g) u = g sigmoid(g) u.
template <typename T>
KILN_AVX2 inline void SiluMulForward8(const T* g, const T* u, T* y) {
  const __m256 gv = Load8(g);
  Store8(y, _mm256_mul_ps(_mm256_mul_ps(gv, Sigmoid8(gv)), Load8(u)));
}

// du = dy silu(g); dg = dy u s (1 + g (1 - s)), s = sigmoid(g).
template <typename T>
KILN_AVX2 inline void SiluMulBackward8(const T* dy, const T* g, const T* u, T* dg, T* du) {
  const __m256 gv = Load8(g), dyv = Load8(dy), one = _mm256_set1_ps(1.0f);
  const __m256 sv = Sigmoid8(gv);
  Store8(du, _mm256_mul_ps(dyv, _mm256_mul_ps(gv, sv)));
  const __m256 slope = _mm256_mul_ps(sv, _mm256_fmadd_ps(gv, _mm256_sub_ps(one, sv), one));
  Store8(dg, _mm256_mul_ps(_mm256_mul_ps(dyv, Load8(u)), slope));
}

// As ForwardRange: the tail through the same 8-lane code on padded copies.
template <typename T>
KILN_AVX2 void SiluMulForwardRange(const T* g, const T* u, T* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) SiluMulForward8(g + i, u + i, y + i);
  if (i == n) return;
  T bg[kLanes] = {}, bu[kLanes] = {}, by[kLanes];
  std::copy(g + i, g + n, bg);
  std::copy(u + i, u + n, bu);
  SiluMulForward8(bg, bu, by);
  std::copy(by, by + (n - i), y + i);
}

template <typename T>
KILN_AVX2 void SiluMulBackwardRange(const T* dy, const T* g, const T* u, T* dg, T* du, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) SiluMulBackward8(dy + i, g + i, u + i, dg + i, du + i);
  if (i == n) return;
  T bdy[kLanes] = {}, bg[kLanes] = {}, bu[kLanes] = {}, bdg[kLanes], bdu[kLanes];
  std::copy(dy + i, dy + n, bdy);
  std::copy(g + i, g + n, bg);
  std::copy(u + i, u + n, bu);
  SiluMulBackward8(bdy, bg, bu, bdg, bdu);
  std::copy(bdg, bdg + (n - i), dg + i);
  std::copy(bdu, bdu + (n - i), du + i);
}

template <typename T>
void RunSiluMul(const torch::Tensor& g, const torch::Tensor& u, torch::Tensor& y) {
  const T *gp = g.data_ptr<T>(), *up = u.data_ptr<T>();
  T* yp = y.data_ptr<T>();
  ParallelFor(0, g.numel(), kGrain, [&](int64_t begin, int64_t end) {
    SiluMulForwardRange(gp + begin, up + begin, yp + begin, end - begin);
  });
}

template <typename T>
void RunSiluMulBackward(const torch::Tensor& dy, const torch::Tensor& g, const torch::Tensor& u,
                        torch::Tensor& dg, torch::Tensor& du) {
  const T *dyp = dy.data_ptr<T>(), *gp = g.data_ptr<T>(), *up = u.data_ptr<T>();
  T *dgp = dg.data_ptr<T>(), *dup = du.data_ptr<T>();
  ParallelFor(0, g.numel(), kGrain, [&](int64_t begin, int64_t end) {
    SiluMulBackwardRange(dyp + begin, gp + begin, up + begin, dgp + begin, dup + begin,
                         end - begin);
  });
}

class SiluMulFunction : public torch::autograd::Function<SiluMulFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    torch::Tensor g = gate.contiguous(), u = up.contiguous();
    torch::Tensor y = torch::empty_like(g);
    if (g.scalar_type() == torch::kBFloat16) {
      RunSiluMul<c10::BFloat16>(g, u, y);
    } else {
      RunSiluMul<float>(g, u, y);
    }
    ctx->save_for_backward({g, u});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& g = saved[0];
    const torch::Tensor& u = saved[1];
    torch::Tensor dy = grads[0].to(g.scalar_type()).contiguous();
    torch::Tensor dg = torch::empty_like(g), du = torch::empty_like(u);
    if (g.scalar_type() == torch::kBFloat16) {
      RunSiluMulBackward<c10::BFloat16>(dy, g, u, dg, du);
    } else {
      RunSiluMulBackward<float>(dy, g, u, dg, du);
    }
    return {dg, du};
  }
};

// out = x + y, float32 x and bf16 y, in float32: the promoted add's arithmetic (y widened exactly,
// then one float32 add), in one pass without y's float32 copy.
KILN_AVX2 void AddWidenedRange(const float* x, const c10::BFloat16* y, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store8(out + i, _mm256_add_ps(Load8(x + i), Load8(y + i)));
  for (; i < n; ++i) out[i] = x[i] + static_cast<float>(y[i]);
}

torch::Tensor AddWidened(const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const c10::BFloat16* yp = y.data_ptr<c10::BFloat16>();
  float* op = out.data_ptr<float>();
  ParallelFor(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    AddWidenedRange(xp + begin, yp + begin, op + begin, end - begin);
  });
  return out;
}

// The backward of x + y as autograd gives it for the promoted add: the gradient itself for x, and
// for y rounded to bf16.
class ResidualAddFunction : public torch::autograd::Function<ResidualAddFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const torch::Tensor& x,
                               const torch::Tensor& y) {
    return AddWidened(x, y);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], grads[0].to(torch::kBFloat16)};
  }
};

}  // namespace
#endif  // KILN_GELU_KERNEL

torch::Tensor GeluTanh(const torch::Tensor& x) {
#ifdef KILN_GELU_KERNEL
  // Under LibTorch's tracer (TorchScript export) the ATen op, which the trace can record.
  if (x.device().is_cpu() &&
      (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16) &&
      x.layout() == torch::kStrided && bf16::HasAvx2Fma() && !torch::jit::tracer::isTracing()) {
    return GeluTanhFunction::apply(x);
  }
#endif
  return torch::gelu(x, "tanh");
}

torch::Tensor ResidualAdd(const torch::Tensor& x, const torch::Tensor& y) {
#ifdef KILN_GELU_KERNEL
  if (x.device().is_cpu() && y.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
      y.scalar_type() == torch::kBFloat16 && x.sizes() == y.sizes() && x.is_contiguous() &&
      y.is_contiguous() && x.layout() == torch::kStrided && y.layout() == torch::kStrided &&
      bf16::HasAvx2Fma() && !torch::jit::tracer::isTracing()) {
    const bool recording =
        torch::GradMode::is_enabled() && (x.requires_grad() || y.requires_grad());
    return recording ? ResidualAddFunction::apply(x, y) : AddWidened(x, y);
  }
#endif
  return x + y;
}

torch::Tensor SiluMul(const torch::Tensor& gate, const torch::Tensor& up) {
#ifdef KILN_GELU_KERNEL
  const bool recording =
      torch::GradMode::is_enabled() && (gate.requires_grad() || up.requires_grad());
  if (recording && gate.device().is_cpu() && up.device().is_cpu() &&
      gate.scalar_type() == up.scalar_type() &&
      (gate.scalar_type() == torch::kFloat32 || gate.scalar_type() == torch::kBFloat16) &&
      gate.sizes() == up.sizes() && gate.layout() == torch::kStrided &&
      up.layout() == torch::kStrided && bf16::HasAvx2Fma() && !torch::jit::tracer::isTracing()) {
    return SiluMulFunction::apply(gate, up);
  }
#endif
  return torch::silu(gate) * up;
}

}  // namespace kiln
