// bfloat16 <-> float32 conversion on AVX2 lanes, for the fused CPU kernels' bf16 paths (gelu_tanh,
// causal_attention), and the exp they share. Widening is exact (bf16 is float32's upper half);
// narrowing rounds to nearest even, as c10::BFloat16 does, and keeps NaN a NaN. x86-64 only
// (KILN_BF16_LANES); callers check the CPU has AVX2 before calling.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#define KILN_BF16_LANES 1
#define KILN_AVX2 __attribute__((target("avx2,fma")))

namespace kiln::bf16 {

// Whether this CPU runs the KILN_AVX2 functions (AVX2 and FMA).
inline bool HasAvx2Fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

KILN_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
KILN_AVX2 inline __m256 Load8(const c10::BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
KILN_AVX2 inline void Store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
KILN_AVX2 inline void Store8(c10::BFloat16* p, __m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), nan);
  // Pack the 8 32-bit lanes (each < 2^16) to 16 bits: packus works per 128-bit half, so gather
  // the two halves' results into the low 128 bits.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

// exp(z) for z <= 0, to about 1 ulp: Cephes' expf. z = n ln2 + r, |r| <= ln2 / 2, e^r by a
// degree-6 polynomial, 2^n through the exponent bits. Below -87 (near float's smallest normal) it
// returns exp(-87), about 1.6e-38, rather than a denormal or 0; NaN stays NaN.
KILN_AVX2 inline __m256 Exp8(__m256 z) {
  z = _mm256_max_ps(_mm256_set1_ps(-87.0f), z);  // this operand order keeps a NaN z
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), z);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// dst[0, n) <- src[0, n), converted.
template <typename From, typename To>
KILN_AVX2 inline void Convert(const From* src, To* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(dst + i, Load8(src + i));
  for (; i < n; ++i) dst[i] = static_cast<To>(static_cast<float>(src[i]));
}

}  // namespace kiln::bf16
#endif
