#include "kernels/cpu/dropout.h"

#include <bit>
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
    // philox::dropout_keep's test, uniform (word >> 8) / 2^24 >= float(p), in integers: the
    // uniform is k / 2^24 exactly, and float(p) * 2^24 is exact too.
    const auto keep_from =
        static_cast<std::uint32_t>(std::ceil(static_cast<double>(static_cast<float>(p)) * 16777216.0));
    const std::int64_t n = x.numel();
    // One Philox block gives the uniforms of 4 consecutive elements (philox::uniform's layout).
    // Groups of kLanes whole blocks are generated lane by lane, so that the rounds vectorize; the
    // blocks of the last partial group one by one.
    constexpr std::int64_t kGroup = 4 * philox::kLanes;
    const std::int64_t groups = n / kGroup;
#pragma omp parallel for schedule(static) if (n > 8192)
    for (std::int64_t grp = 0; grp < groups; ++grp) {
      std::uint32_t words[philox::kLanes][4];
      philox::philox4x32_10_lanes(offset + static_cast<std::uint64_t>(grp * philox::kLanes), seed, words);
      // Local restrict pointers: the captured ones might alias as far as the compiler knows.
      const T* __restrict__ src = in + grp * kGroup;
      T* __restrict__ dst = out + grp * kGroup;
      const std::uint32_t* bits = &words[0][0];
      for (std::int64_t e = 0; e < kGroup; ++e) dst[e] = kept_or_zero(src[e] * scale, (bits[e] >> 8) >= keep_from);
    }
    for (std::int64_t blk = groups * philox::kLanes; 4 * blk < n; ++blk) {
      const std::uint64_t ctr = offset + static_cast<std::uint64_t>(blk);
      const philox::Block r =
          philox::philox4x32_10(static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0u, 0u,
                                static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
      for (std::int64_t i = 4 * blk; i < std::min(n, 4 * blk + 4); ++i)
        out[i] = kept_or_zero(in[i] * scale, (r.v[i - 4 * blk] >> 8) >= keep_from);
    }
  });
  return y;
}

}  // namespace tessera::cpu
