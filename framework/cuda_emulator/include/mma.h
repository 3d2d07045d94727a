// Tessera's CUDA emulator: nvcuda::wmma for 16x16x16 tiles (bfloat16 in, float32 accumulation).
// The GPU spreads a fragment over the warp's 32 lanes in an unspecified layout; here every lane
// holds the whole tile, loads and multiplies it itself, and stores only its share of the elements
// (element e of the row-major tile by lane e % 32). A lane that loads before the writes of other
// lanes are done (a missing __syncwarp) then stores wrong values, as it would on the GPU. The
// alignment rules the GPU leaves undefined when broken are checked: 32-byte aligned pointers and
// leading dimensions that are multiples of 16 bytes; so is the rule that every lane of the warp
// makes each load, store and mma_sync, loads and stores with the same pointer, ldm and layout
// (uniform_warp_call: checked without synchronizing the lanes, so a missing __syncwarp still
// shows). fill_fragment is not a warp operation: not checked.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  float tile[kRows * kCols];  // row-major, the whole tile (see above); no per-lane x[]
};

namespace detail {

template <typename T>
void check_layout(const T* p, unsigned ldm, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0) tessera::cuda_emulator::fault(what);
  if ((ldm * sizeof(T)) % 16 != 0) tessera::cuda_emulator::fault(what);
}
// A call's arguments, for uniform_warp_call.
inline std::uint64_t arguments(const void* p, unsigned ldm, int layout) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)) * 1000003u ^
         (static_cast<std::uint64_t>(ldm) << 2) ^ static_cast<std::uint64_t>(layout);
}

inline float value(float x) { return x; }
inline float value(__nv_bfloat16 x) { return __bfloat162float(x); }

}  // namespace detail

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load names its memory layout");
  detail::check_layout(p, ldm, "wmma::load_matrix_sync: pointer not 32-byte aligned or ldm not a multiple of 16 bytes");
  tessera::cuda_emulator::uniform_warp_call("wmma::load_matrix_sync",
                                            detail::arguments(p, ldm, std::is_same_v<Layout, row_major> ? 0 : 1));
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.tile[r * 16 + c] = detail::value(std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[r + c * ldm]);
}

template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm, layout_t layout) {
  detail::check_layout(p, ldm, "wmma::load_matrix_sync: pointer not 32-byte aligned or ldm not a multiple of 16 bytes");
  tessera::cuda_emulator::uniform_warp_call("wmma::load_matrix_sync", detail::arguments(p, ldm, 2 + layout));
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.tile[r * 16 + c] = layout == mem_row_major ? p[r * ldm + c] : p[r + c * ldm];
}

template <typename T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm, layout_t layout) {
  detail::check_layout(p, ldm,
                       "wmma::store_matrix_sync: pointer not 32-byte aligned or ldm not a multiple of 16 bytes");
  tessera::cuda_emulator::uniform_warp_call("wmma::store_matrix_sync", detail::arguments(p, ldm, layout));
  for (int e = tessera::cuda_emulator::lane(); e < 256; e += 32) {
    const int r = e / 16, c = e % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.tile[e];
  }
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {
  for (float& x : f.tile) x = v;
}

template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  tessera::cuda_emulator::uniform_warp_call("wmma::mma_sync", 0);  // fragments are each lane's own
  float out[256];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float acc = c.tile[r * 16 + n];
      for (int k = 0; k < 16; ++k) acc += a.tile[r * 16 + k] * b.tile[k * 16 + n];
      out[r * 16 + n] = acc;
    }
  for (int e = 0; e < 256; ++e) d.tile[e] = out[e];
}

}  // namespace nvcuda::wmma
