// Philox4x32-10 counter-based RNG (Salmon et al., SC'11), shared by the CPU and CUDA kernels:
// the random numbers are a pure function of (seed, counter), so both produce identical masks.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif

namespace tessera::philox {

struct Block {
  std::uint32_t v[4];
};

TESSERA_HD std::uint32_t mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t* hi) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *hi = static_cast<std::uint32_t>(p >> 32);
  return static_cast<std::uint32_t>(p);
}

// Ten rounds of Philox4x32 on counter (c0..c3) with key (k0, k1).
TESSERA_HD Block philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3, std::uint32_t k0,
                               std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, hi1;
    const std::uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
    const std::uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Block{{c0, c1, c2, c3}};
}

#if !defined(__CUDACC__)
// kLanes consecutive blocks (counters first, first + 1, ...; key `key`), word k of block `lane`
// into words[lane][k] (element order, as philox::uniform counts). A plain loop over the lanes
// around philox4x32_10, which the compiler vectorizes (AVX2: 8 lanes, vpmuludq): the CPU dropout
// uses it, the GPU has a thread per block instead.
constexpr int kLanes = 8;
inline void philox4x32_10_lanes(std::uint64_t first, std::uint64_t key, std::uint32_t (&words)[kLanes][4]) {
  for (int l = 0; l < kLanes; ++l) {
    const std::uint64_t ctr = first + static_cast<std::uint64_t>(l);
    const Block b = philox4x32_10(static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0u, 0u,
                                  static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
    for (int k = 0; k < 4; ++k) words[l][k] = b.v[k];
  }
}
#endif

// Uniform in [0, 1) for element `index` of the stream (seed, offset): element i uses word
// i % 4 of the block at counter offset + i / 4. 24 random bits, exactly representable in float.
TESSERA_HD float uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t index) {
  const std::uint64_t ctr = offset + index / 4;
  const Block b = philox4x32_10(static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0u, 0u,
                                static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return static_cast<float>(b.v[index % 4] >> 8) * (1.0f / 16777216.0f);
}

// Dropout keeps element `index` when its uniform number is >= p.
TESSERA_HD bool dropout_keep(std::uint64_t seed, std::uint64_t offset, std::uint64_t index, float p) {
  return uniform(seed, offset, index) >= p;
}

}  // namespace tessera::philox
