// Tessera's CUDA emulator: __nv_bfloat16 and its conversions, as the GPU computes them (float32 to
// bfloat16 rounds to nearest even; a NaN becomes the canonical NaN 0x7fff, as cvt.rn.bf16.f32 gives).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"

struct __nv_bfloat16 {
  unsigned short x;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fffu};
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return __nv_bfloat16{static_cast<unsigned short>(rounded >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
