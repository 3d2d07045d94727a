// exp for float that the compiler can vectorize: libm's expf is an opaque call, so every loop over
// exp (softmax, log-sum-exp, cross entropy, attention) ran one element at a time. Branch-free
// Cody-Waite reduction and a degree-6 polynomial (Cephes' coefficients): within 2 ulp of the
// correctly rounded result over the whole float range (tests/unit/test_kernels.cpp checks every
// float from -104 to 89), +inf and NaN kept, -inf and results below FLT_MIN flushed to +0.
// double keeps std::exp: the float64 gradient checks want libm's accuracy.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tessera::cpu {

inline float exp_f32(float x) {
  constexpr float kMax = 88.72283935546875f;   // exp(x) overflows above this (largest x with finite exp)
  constexpr float kMin = -87.33654022216797f;  // ln(FLT_MIN): below it the result is subnormal; gives 0
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 bits, so n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer held in the low bits
  // Clamp so that n stays in [-126, 128]; a NaN passes unchanged (comparisons with it are false).
  float xc = x > kMax ? kMax : x;
  xc = xc < kMin ? kMin : xc;
  const float shifted = xc * kLog2e + kRound;
  const std::int32_t n = std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kRound);
  const float fn = shifted - kRound;
  const float r = (xc - fn * kLn2Hi) - fn * kLn2Lo;  // |r| <= ln(2)/2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  // 2^n as a float's exponent field, which holds at most 2^127: n = 128 takes 2^127 * 2.
  const float twice = n > 127 ? 2.0f : 1.0f;
  const std::int32_t n_field = n > 127 ? 127 : n;
  const float y = er * std::bit_cast<float>((n_field + 127) << 23) * twice;
  const float big = x > kMax ? std::numeric_limits<float>::infinity() : y;
  return x < kMin ? 0.0f : big;
}

// exp_f32 for float, std::exp for double: for the kernels templated on the element type.
template <typename T>
T exp_vec(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

}  // namespace tessera::cpu
