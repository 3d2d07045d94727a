#include "kernels/cpu/dropout.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "kernels/philox.h"

namespace tessera::cpu {

namespace {
// v where `keep`, else +0 (also for an infinite or NaN v, as on the GPU), by masking its bits
// rather than branching: the element loop then vectorizes.
template <typename T>
T kept_or_zero(T v, bool keep) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const Bits mask = keep ? ~Bits{0} : Bits{0};
  return std::bit_cast<T>(static_cast<Bits>(std::bit_cast<Bits>(v) & mask));
}

// philox::dropout_keep's test, uniform (word >> 8) / 2^24 >= float(p), in integers: the uniform
// is k / 2^24 exactly, and float(p) * 2^24 is exact too.
struct DropoutRule {
  std::uint64_t seed, offset;
  std::uint32_t keep_from;
};

// One Philox block gives the uniforms of 4 consecutive elements (philox::uniform's layout).
// Groups of kLanes whole blocks are generated lane by lane, so that the rounds vectorize.
template <typename T>
void drop_block_groups(const T* in, T* out, std::int64_t groups, DropoutRule rule, T scale) {
  constexpr std::int64_t kGroup = 4 * philox::kLanes;
#pragma omp parallel for schedule(static) if (groups * kGroup > 8192)
  for (std::int64_t grp = 0; grp < groups; ++grp) {
    std::uint32_t words[philox::kLanes][4];
    philox::philox4x32_10_lanes(rule.offset + static_cast<std::uint64_t>(grp * philox::kLanes), rule.seed, words);
    // Local restrict pointers: the captured ones might alias as far as the compiler knows.
    const T* __restrict__ src = in + grp * kGroup;
    T* __restrict__ dst = out + grp * kGroup;
    const std::uint32_t* bits = &words[0][0];
    for (std::int64_t e = 0; e < kGroup; ++e) dst[e] = kept_or_zero(src[e] * scale, (bits[e] >> 8) >= rule.keep_from);
  }
}

#if defined(__AVX512F__)
// GCC 12 warns about the "undefined" pass-through operand inside its own AVX-512 headers (GCC
// bug 105593, fixed in GCC 13): in the multiplies and shifts of the next three functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// a * m as 32-bit halves, lane by lane (m's multiplier in every 64-bit lane): the low words
// returned, the high ones in *hi. AVX-512 multiplies the even lanes, then the odd ones.
__m512i mul_lo_hi(__m512i a, __m512i m, __m512i* hi) {
  const __m512i even = _mm512_mul_epu32(a, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  return _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// philox4x32_10 for the 16 blocks at counters first .. first + 15, a block per lane; out[i]
// gets the words of elements 16 i .. 16 i + 15 in element order. The compiler's vectorization
// of the lane loop ran at half this speed.
void philox16(std::uint64_t first, std::uint64_t key, __m512i (&out)[4]) {
  const __m512i lo = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(first)));
  __m512i c0 = _mm512_add_epi32(lo, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, lo);  // into the counter's high word
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(first >> 32)));
  __m512i c1 = _mm512_mask_add_epi32(hi, carry, hi, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  auto k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, hi1;
    const __m512i lo0 = mul_lo_hi(c0, m0, &hi0), lo1 = mul_lo_hi(c2, m1, &hi1);
    c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32(static_cast<int>(k0)), 0x96);  // three-way xor
    c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32(static_cast<int>(k1)), 0x96);
    c1 = lo1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // Word k of block l (lane l of ck) goes to element 4 l + k: a 4 x 16 transpose.
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);  // blocks 4j, 4j + 1
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);  // 4j + 2, 4j + 3
  const __m512i x0 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i x1 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i x2 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i x3 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = _mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));
  out[1] = _mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
  out[2] = _mm512_shuffle_i32x4(x2, x3, _MM_SHUFFLE(2, 0, 2, 0));
  out[3] = _mm512_shuffle_i32x4(x2, x3, _MM_SHUFFLE(3, 1, 3, 1));
}

// drop_block_groups for float in groups of 16 blocks (64 elements).
void drop_block_groups16(const float* in, float* out, std::int64_t groups, DropoutRule rule, float scale) {
  const __m512i keep_from = _mm512_set1_epi32(static_cast<int>(rule.keep_from));
  const __m512 scales = _mm512_set1_ps(scale);
#pragma omp parallel for schedule(static) if (groups * 64 > 8192)
  for (std::int64_t grp = 0; grp < groups; ++grp) {
    __m512i words[4];
    philox16(rule.offset + static_cast<std::uint64_t>(grp * 16), rule.seed, words);
    for (int i = 0; i < 4; ++i) {
      const __mmask16 keep = _mm512_cmp_epu32_mask(_mm512_srli_epi32(words[i], 8), keep_from, _MM_CMPINT_NLT);
      const std::int64_t e = grp * 64 + 16 * i;
      _mm512_storeu_ps(out + e, _mm512_maskz_mul_ps(keep, _mm512_loadu_ps(in + e), scales));
    }
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// Whole groups of blocks in parallel; returns the number of blocks they covered.
template <typename T>
std::int64_t drop_groups(const T* in, T* out, std::int64_t n, DropoutRule rule, T scale) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    drop_block_groups16(in, out, n / 64, rule, scale);
    return n / 64 * 16;
  }
#endif
  const std::int64_t groups = n / (4 * philox::kLanes);
  drop_block_groups(in, out, groups, rule, scale);
  return groups * philox::kLanes;
}
}  // namespace

Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset) {
  check_float("dropout", x);
  check_cpu("dropout", x);
  TESSERA_CHECK(p >= 0.0 && p < 1.0, "dropout: probability {} outside [0, 1)", p);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("dropout", x.dtype(), [&]<typename T>() {
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    const DropoutRule rule{
        seed, offset, static_cast<std::uint32_t>(std::ceil(static_cast<double>(static_cast<float>(p)) * 16777216.0))};
    const std::int64_t n = x.numel();
    // The blocks after the last whole group, one by one.
    for (std::int64_t blk = drop_groups(in, out, n, rule, scale); 4 * blk < n; ++blk) {
      const std::uint64_t ctr = offset + static_cast<std::uint64_t>(blk);
      const philox::Block r =
          philox::philox4x32_10(static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0u, 0u,
                                static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
      for (std::int64_t i = 4 * blk; i < std::min(n, 4 * blk + 4); ++i)
        out[i] = kept_or_zero(in[i] * scale, (r.v[i - 4 * blk] >> 8) >= rule.keep_from);
    }
  });
  return y;
}

}  // namespace tessera::cpu
