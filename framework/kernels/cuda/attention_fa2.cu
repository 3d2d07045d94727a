// Flash attention in the FlashAttention-2 design, head dims 64 and 128: bfloat16 on the tensor
// cores by mma.sync m16n8k16, and float32 by mma.sync m16n8k8 .tf32 when train.tf32 allows it
// (operands rounded to tf32 by cvt.rna; without train.tf32, float32 stays on attention.cu's exact
// kernels). Forward: a block of 4 warps owns 64 query rows (16 a warp) and walks the key tiles
// (64 keys; float32: 32, so that its tiles fit sm_80's 163 KB) once. The output accumulator O and
// each row's running max m and sum l stay in registers (the mma.sync accumulator fragments); Q, K
// and V tiles come through shared memory by cp.async, the next K/V tile loading while the current
// one is multiplied (two buffers). bfloat16 operands come by ldmatrix (V transposed on the way);
// tf32 ones by plain shared loads in the documented fragment layout. The score fragments are the
// P operand of P V without a trip through shared memory (bf16: the C layout of two 16 x 8 tiles
// is the A layout of one 16 x 16; tf32: after a permutation of the keys inside each 8, see
// accumulate_pb). Masks and results as attention.cu's kernel (the CPU twin's): key padding, causal
// aligned bottom right, keys past Lk, queries past Lq; k and v may hold more positions than Lk (a
// decoder cache, AttentionShape::k_rows). The backward (below) is parallel over key blocks. Head
// dim 32 stays on attention.cu's kernels.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/mma.cuh"

namespace tessera::cuda {
namespace {

using bf16 = __nv_bfloat16;

template <typename T>
constexpr bool kTf32 = std::is_same_v<T, float>;

// Row stride of every shared tile: D elements and 16 bytes of padding, so that the 8 rows an
// ldmatrix (or a tf32 fragment load) reads start on distinct banks.
template <typename T, int D>
constexpr int kRowLd = D + 16 / static_cast<int>(sizeof(T));

template <typename T, int D>
struct Fa2 {
  static constexpr int kWarps = 4, kBr = 16 * kWarps, kBc = kTf32<T> ? 32 : 64;
  static constexpr int kLd = kRowLd<T, D>;
  static constexpr int kQ = 0, kK = kBr * kLd, kV = kK + 2 * kBc * kLd;  // in elements; K, V: 2 buffers
  static constexpr int kBytes = (kV + 2 * kBc * kLd) * static_cast<int>(sizeof(T));
  static constexpr int kScoreTiles = kBc / 8, kOutTiles = D / 8;
};

// Block-wide, asynchronous: rows [row0, row0 + rows) of a [len, D] matrix into a shared tile (row
// stride kRowLd); rows past len are zero-filled.
template <typename T, int D>
__device__ void copy_rows(T* tile, const T* g, std::int64_t row0, int rows, std::int64_t len) {
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(T)), kChunks = D / kPerChunk;  // 16 bytes a chunk
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * kChunks; idx += static_cast<int>(blockDim.x)) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool in = row0 + r < len;
    ptx::cp_async_16(tile + r * kRowLd<T, D> + c * kPerChunk, in ? g + (row0 + r) * D + c * kPerChunk : g, in ? 16 : 0);
  }
}

// C (16 x 8 N, accumulator fragments) = A B^T over D: A's 16 rows and B's 8 N rows of D
// elements each in shared memory (row stride kRowLd). Both operands come by plain ldmatrix.
template <int D, int N>
__device__ void product_nt(float (&Cf)[N][4], const bf16* A, const bf16* B) {
  constexpr int kLd = kRowLd<bf16, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (auto& t : Cf)
    for (float& x : t) x = 0.0f;
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    std::uint32_t a[4];
    ptx::ldmatrix_x4<false>(a, A + (lane % 16) * kLd + k0 + (lane / 16) * 8);
#pragma unroll
    for (int n = 0; n < N; n += 2) {
      std::uint32_t b[4];  // b[0..1]: B rows n * 8.., b[2..3]: the next 8
      ptx::ldmatrix_x4<false>(b, B + (n * 8 + (lane / 16) * 8 + lane % 8) * kLd + k0 + ((lane / 8) % 2) * 8);
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ptx::mma_bf16_16x8x16(Cf[n], a, b0, Cf[n]);
      ptx::mma_bf16_16x8x16(Cf[n + 1], a, b1, Cf[n + 1]);
    }
  }
}

// The same in tf32: A (16 x 8: rows groupID, + 8; columns threadID_in_group, + 4) and B (8 x 8:
// rows threadID_in_group, + 4 of column groupID, i.e. of B's row n * 8 + groupID) loaded per lane.
template <int D, int N>
__device__ void product_nt(float (&Cf)[N][4], const float* A, const float* B) {
  constexpr int kLd = kRowLd<float, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane >> 2, t = lane % 4;
  for (auto& c : Cf)
    for (float& x : c) x = 0.0f;
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 8) {
    const float* a_rows = A + g * kLd + k0 + t;
    const std::uint32_t a[4] = {ptx::to_tf32(a_rows[0]), ptx::to_tf32(a_rows[8 * kLd]), ptx::to_tf32(a_rows[4]),
                                ptx::to_tf32(a_rows[8 * kLd + 4])};
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const float* b_row = B + (n * 8 + g) * kLd + k0 + t;
      const std::uint32_t b[2] = {ptx::to_tf32(b_row[0]), ptx::to_tf32(b_row[4])};
      ptx::mma_tf32_16x8x8(Cf[n], a, b, Cf[n]);
    }
  }
}

// Acc (16 x D) += P B: P (16 x 16 K, accumulator fragments of 16 x 8 tiles, rounded to bfloat16
// as the A operand), B (K x D) in shared memory (row stride kRowLd), by ldmatrix.trans.
template <int D, int K>
__device__ void accumulate_pb(float (&Acc)[D / 8][4], const float (&P)[K / 8][4], const bf16* B) {
  constexpr int kLd = kRowLd<bf16, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    // A fragment of columns 16 kk..: registers (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8).
    const std::uint32_t a[4] = {ptx::pack_bf16(P[2 * kk][0], P[2 * kk][1]), ptx::pack_bf16(P[2 * kk][2], P[2 * kk][3]),
                                ptx::pack_bf16(P[2 * kk + 1][0], P[2 * kk + 1][1]),
                                ptx::pack_bf16(P[2 * kk + 1][2], P[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      std::uint32_t b[4];  // b[0..1]: columns n * 8.., b[2..3]: the next 8
      ptx::ldmatrix_x4<true>(b, B + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kLd + n * 8 + (lane / 16) * 8);
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ptx::mma_bf16_16x8x16(Acc[n], a, b0, Acc[n]);
      ptx::mma_bf16_16x8x16(Acc[n + 1], a, b1, Acc[n + 1]);
    }
  }
}

// The same in tf32, 8 keys a step. A lane's accumulator elements of a 16 x 8 P tile are (g, 2t),
// (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1); the tf32 A operand wants columns t and t + 4. A sum
// over k does not care for the order of k, so A's column t stands for key 2t and column t + 4 for
// key 2t + 1: the registers are P's own, and B's rows t and t + 4 are read from keys 2t and 2t + 1.
template <int D, int K>
__device__ void accumulate_pb(float (&Acc)[D / 8][4], const float (&P)[K / 8][4], const float* B) {
  constexpr int kLd = kRowLd<float, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane >> 2, t = lane % 4;
#pragma unroll
  for (int kk = 0; kk < K / 8; ++kk) {
    const std::uint32_t a[4] = {ptx::to_tf32(P[kk][0]), ptx::to_tf32(P[kk][2]), ptx::to_tf32(P[kk][1]),
                                ptx::to_tf32(P[kk][3])};
    const float* b_rows = B + (kk * 8 + 2 * t) * kLd + g;  // keys 2t and 2t + 1, column groupID
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const std::uint32_t b[2] = {ptx::to_tf32(b_rows[n * 8]), ptx::to_tf32(b_rows[kLd + n * 8])};
      ptx::mma_tf32_16x8x8(Acc[n], a, b, Acc[n]);
    }
  }
}

// Row state of one lane: rows groupID (h = 0) and groupID + 8 (h = 1) of the warp's 16.
struct RowState {
  float m[2], l[2];  // l: this lane's part of the row sum (its columns), summed over the group at the end
};

// Masks and scales S, updates m and l, rescales O, and turns S into P = exp(S - m) in place.
template <typename T, int D>
__device__ void online_softmax(float (&S)[Fa2<T, D>::kScoreTiles][4], float (&O)[Fa2<T, D>::kOutTiles][4], RowState& st,
                               const AttentionShape& s, const std::int32_t* pad, std::int64_t b, std::int64_t row0,
                               std::int64_t k0) {
  using C = Fa2<T, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::int64_t qi = row0 + (lane >> 2) + 8 * h;
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < C::kScoreTiles; ++n)
      for (int i = 2 * h; i < 2 * h + 2; ++i) {
        const std::int64_t kj = k0 + n * 8 + (lane % 4) * 2 + (i & 1);
        S[n][i] = attention_visible(s, pad, b, qi, kj) ? S[n][i] * s.scale : -INFINITY;
        tile_max = max_keeping_nan(tile_max, S[n][i]);
      }
    // The row's other columns live in the three other lanes of the group (lane ^ 1, lane ^ 2).
    tile_max = max_keeping_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = max_keeping_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = max_keeping_nan(st.m[h], tile_max);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(st.m[h] - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < C::kScoreTiles; ++n)
      for (int i = 2 * h; i < 2 * h + 2; ++i) {
        S[n][i] = S[n][i] == -INFINITY ? 0.0f : expf(S[n][i] - m_new);
        sum += S[n][i];
      }
    st.l[h] = st.l[h] * alpha + sum;
    st.m[h] = m_new;
#pragma unroll
    for (int n = 0; n < C::kOutTiles; ++n) {
      O[n][2 * h] *= alpha;
      O[n][2 * h + 1] *= alpha;
    }
  }
}

// out = O / l and lse = m + log l for the lane's two rows; a row that sees no key gets 0 and -inf.
template <typename T, int D>
__device__ void write_rows(const float (&O)[D / 8][4], RowState& st, T* out, float* lse, std::int64_t bh,
                           std::int64_t row0, std::int64_t q_len) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const std::int64_t qi = row0 + (lane >> 2) + 8 * h;
    if (qi >= q_len) continue;
    const bool seen = l != 0.0f;  // a NaN score made l NaN: out and lse NaN
    const float inv = seen ? 1.0f / l : 0.0f;
    T* og = out + (bh * q_len + qi) * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      og[n * 8] = from_float<T>(seen ? O[n][2 * h] * inv : 0.0f);
      og[n * 8 + 1] = from_float<T>(seen ? O[n][2 * h + 1] * inv : 0.0f);
    }
    if (lane % 4 == 0) lse[bh * q_len + qi] = seen ? st.m[h] + logf(l) : -INFINITY;
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(Fa2<T, D>::kWarps * 32)
    attention_fa2_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 const std::int32_t* __restrict__ pad, T* __restrict__ out, float* __restrict__ lse,
                                 AttentionShape s) {
  using C = Fa2<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  // grid: (query tiles, heads, batch), as attention.cu's kernel; k and v hold k_rows positions a head.
  const std::int64_t b = blockIdx.z, bh = b * s.heads + blockIdx.y, q0 = static_cast<std::int64_t>(blockIdx.x) * C::kBr;
  const T *kg = k + bh * s.k_rows * D, *vg = v + bh * s.k_rows * D;
  const int tiles_n = static_cast<int>((attention_key_end(s, q0, C::kBr) + C::kBc - 1) / C::kBc);
  float O[C::kOutTiles][4] = {};
  RowState st{{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
  if (tiles_n > 0) {
    copy_rows<T, D>(tiles + C::kQ, q + bh * s.q_len * D, q0, C::kBr, s.q_len);
    copy_rows<T, D>(tiles + C::kK, kg, 0, C::kBc, s.k_len);
    copy_rows<T, D>(tiles + C::kV, vg, 0, C::kBc, s.k_len);
    ptx::cp_async_commit();
  }
  for (int t = 0; t < tiles_n; ++t) {
    const int buf = t % 2;
    if (t + 1 < tiles_n) {  // the next tile into the other buffer, freed by the last iteration's barrier
      const std::int64_t next = static_cast<std::int64_t>(t + 1) * C::kBc;
      copy_rows<T, D>(tiles + C::kK + (1 - buf) * C::kBc * C::kLd, kg, next, C::kBc, s.k_len);
      copy_rows<T, D>(tiles + C::kV + (1 - buf) * C::kBc * C::kLd, vg, next, C::kBc, s.k_len);
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();  // this tile's group has landed; the next one may still fly
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of this tile are visible
    float S[C::kScoreTiles][4];
    product_nt<D, C::kScoreTiles>(S, tiles + C::kQ + warp * 16 * C::kLd, tiles + C::kK + buf * C::kBc * C::kLd);
    online_softmax<T, D>(S, O, st, s, pad, b, q0 + warp * 16, static_cast<std::int64_t>(t) * C::kBc);
    accumulate_pb<D, C::kBc>(O, S, tiles + C::kV + buf * C::kBc * C::kLd);  // O += P V
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  write_rows<T, D>(O, st, out, lse, bh, q0 + warp * 16, s.q_len);
}

template <typename T, int D>
cudaError_t forward_fa2(const void* q, const void* k, const void* v, const std::int32_t* pad, void* out, float* lse,
                        const AttentionShape& s, cudaStream_t stream) {
  using C = Fa2<T, D>;
  const cudaError_t err =
      cudaFuncSetAttribute(attention_fa2_forward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((s.q_len + C::kBr - 1) / C::kBr), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  attention_fa2_forward_kernel<T, D><<<grid, C::kWarps * 32, C::kBytes, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad, static_cast<T*>(out), lse, s);
  return cudaGetLastError();
}

// ---- backward: a block owns 64 keys (16 a warp) and walks the query tiles of 32 ----
// dK and dV of the block's keys accumulate in registers; dQ, which every key block adds to, goes
// to a float32 buffer by atomicAdd (FlashAttention-2's choice: a separate dQ pass over the keys
// would recompute S and dP once more for every query and key tile, the atomics add each dQ
// element once per key block and warp).
template <typename T, int D>
struct Fa2Bwd {
  static constexpr int kWarps = 4, kBc = 16 * kWarps, kBr = 32, kLd = kRowLd<T, D>;
  static constexpr int kLdS = kBr + 16 / static_cast<int>(sizeof(T));
  static constexpr int kK = 0, kV = kBc * kLd, kQ = 2 * kBc * kLd, kDO = kQ + 2 * kBr * kLd;  // in elements of T
  static constexpr int kDS = kDO + 2 * kBr * kLd;  // per warp [16][kLdS]: dS^T for dQ
  static constexpr int kRowBytes = (kDS + kWarps * 16 * kLdS) * static_cast<int>(sizeof(T));  // then lse, delta
  static constexpr int kBytes = kRowBytes + 4 * kBr * 4;  // lse and delta: [2][kBr] floats each
  static constexpr int kQTiles = kBr / 8, kDTiles = D / 8;
};

// The next query tile's Q and dO (cp.async) and lse and delta (plain loads; rows past Lq: 0).
template <typename T, int D>
__device__ void load_query_tile(T* tiles, float* rows, int buf, const T* qg, const T* dog, const float* lse,
                                const float* delta, std::int64_t bh, std::int64_t qt, std::int64_t q_len) {
  using C = Fa2Bwd<T, D>;
  copy_rows<T, D>(tiles + C::kQ + buf * C::kBr * C::kLd, qg, qt, C::kBr, q_len);
  copy_rows<T, D>(tiles + C::kDO + buf * C::kBr * C::kLd, dog, qt, C::kBr, q_len);
  ptx::cp_async_commit();
  for (int r = static_cast<int>(threadIdx.x); r < C::kBr; r += static_cast<int>(blockDim.x)) {
    const bool in = qt + r < q_len;
    rows[buf * C::kBr + r] = in ? lse[bh * q_len + qt + r] : 0.0f;
    rows[(2 + buf) * C::kBr + r] = in ? delta[bh * q_len + qt + r] : 0.0f;
  }
}

// dq_accum[16 query rows from row0, 64 columns from n0] += scale * acc (accumulator fragments).
template <int D>
__device__ void add_to_dq(float* dq_accum, const float (&acc)[8][4], std::int64_t bh, std::int64_t row0, int n0,
                          const AttentionShape& s) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t qi = row0 + (lane >> 2) + 8 * (i >> 1);
    if (qi >= s.q_len) continue;
    float* row = dq_accum + (bh * s.q_len + qi) * D + n0 + (lane % 4) * 2 + (i & 1);
    for (int n = 0; n < 8; ++n) atomicAdd(row + n * 8, acc[n][i] * s.scale);
  }
}

// dq_accum[rows qt.., all D] += scale * dS K_w: dS from the warp's dS^T in shared memory (ldmatrix.trans
// gives the A operand), K_w by ldmatrix.trans; 16 query rows and 64 columns at a time.
template <int D>
__device__ void add_dq(float* dq_accum, const bf16* dSt, const bf16* Kw, std::int64_t bh, std::int64_t qt,
                       const AttentionShape& s) {
  using C = Fa2Bwd<bf16, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32, m = lane / 8;
  for (int mt = 0; mt < C::kBr / 16; ++mt) {
    std::uint32_t a[4];  // matrix m: keys (m / 2) * 8.., queries 16 mt + (m % 2) * 8..
    ptx::ldmatrix_x4<true>(a, dSt + ((m / 2) * 8 + lane % 8) * C::kLdS + 16 * mt + (m % 2) * 8);
    for (int n0 = 0; n0 < D; n0 += 64) {
      float acc[8][4] = {};
#pragma unroll
      for (int n = 0; n < 8; n += 2) {
        std::uint32_t b[4];
        ptx::ldmatrix_x4<true>(b, Kw + (((lane / 8) % 2) * 8 + lane % 8) * C::kLd + n0 + n * 8 + (lane / 16) * 8);
        const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        ptx::mma_bf16_16x8x16(acc[n], a, b0, acc[n]);
        ptx::mma_bf16_16x8x16(acc[n + 1], a, b1, acc[n + 1]);
      }
      add_to_dq<D>(dq_accum, acc, bh, qt + 16 * mt, n0, s);
    }
  }
}

// The same in tf32, 8 keys a step, the keys permuted as in accumulate_pb: A's column t is key 2t
// of the step, column t + 4 key 2t + 1 (A = dS: element (query, key) at dSt[key][query]).
template <int D>
__device__ void add_dq(float* dq_accum, const float* dSt, const float* Kw, std::int64_t bh, std::int64_t qt,
                       const AttentionShape& s) {
  using C = Fa2Bwd<float, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane >> 2, t = lane % 4;
  for (int mt = 0; mt < C::kBr / 16; ++mt)
    for (int n0 = 0; n0 < D; n0 += 64) {
      float acc[8][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < 16; k0 += 8) {
        const float* a_keys = dSt + (k0 + 2 * t) * C::kLdS + 16 * mt + g;
        const std::uint32_t a[4] = {ptx::to_tf32(a_keys[0]), ptx::to_tf32(a_keys[8]), ptx::to_tf32(a_keys[C::kLdS]),
                                    ptx::to_tf32(a_keys[C::kLdS + 8])};
        const float* b_rows = Kw + (k0 + 2 * t) * C::kLd + n0 + g;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const std::uint32_t b[2] = {ptx::to_tf32(b_rows[n * 8]), ptx::to_tf32(b_rows[C::kLd + n * 8])};
          ptx::mma_tf32_16x8x8(acc[n], a, b, acc[n]);
        }
      }
      add_to_dq<D>(dq_accum, acc, bh, qt + 16 * mt, n0, s);
    }
}

// P^T and dS^T of the warp's 16 keys against one query tile, from S^T = K_w Q^T and dP^T = V_w dO^T.
template <typename T, int D>
__device__ void softmax_grad(float (&P)[Fa2Bwd<T, D>::kQTiles][4], float (&dS)[Fa2Bwd<T, D>::kQTiles][4],
                             const float* rows, int buf, const AttentionShape& s, const std::int32_t* pad,
                             std::int64_t b, std::int64_t qt, std::int64_t key0) {
  using C = Fa2Bwd<T, D>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int n = 0; n < C::kQTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qq = n * 8 + (lane % 4) * 2 + (i & 1);
      const std::int64_t kj = key0 + (lane >> 2) + 8 * (i >> 1);
      const bool ok = attention_visible(s, pad, b, qt + qq, kj);
      P[n][i] = ok ? expf(P[n][i] * s.scale - rows[buf * C::kBr + qq]) : 0.0f;
      dS[n][i] = P[n][i] * (dS[n][i] - rows[(2 + buf) * C::kBr + qq]);
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(Fa2Bwd<T, D>::kWarps * 32)
    attention_fa2_backward_kernel(const T* __restrict__ dout, const T* __restrict__ q, const T* __restrict__ k,
                                  const T* __restrict__ v, const std::int32_t* __restrict__ pad,
                                  const float* __restrict__ lse, const float* __restrict__ delta,
                                  float* __restrict__ dq_accum, T* __restrict__ dk, T* __restrict__ dv,
                                  AttentionShape s) {
  using C = Fa2Bwd<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);
  float* rows = reinterpret_cast<float*>(smem + C::kRowBytes);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t b = blockIdx.z, bh = b * s.heads + blockIdx.y, k0 = static_cast<std::int64_t>(blockIdx.x) * C::kBc;
  const T *qg = q + bh * s.q_len * D, *dog = dout + bh * s.q_len * D;
  const T *Kw = tiles + C::kK + warp * 16 * C::kLd, *Vw = tiles + C::kV + warp * 16 * C::kLd;
  T* dSt = tiles + C::kDS + warp * 16 * C::kLdS;
  // Causal: queries before k0 - (Lk - Lq) see none of this block's keys.
  std::int64_t q_begin = s.causal ? k0 - (s.k_len - s.q_len) : 0;
  q_begin = q_begin > 0 ? q_begin / C::kBr * C::kBr : 0;
  if (q_begin < s.q_len) {  // K and V join the first query tile's group
    copy_rows<T, D>(tiles + C::kK, k + bh * s.k_len * D, k0, C::kBc, s.k_len);
    copy_rows<T, D>(tiles + C::kV, v + bh * s.k_len * D, k0, C::kBc, s.k_len);
    load_query_tile<T, D>(tiles, rows, 0, qg, dog, lse, delta, bh, q_begin, s.q_len);
  }
  float dK[C::kDTiles][4] = {}, dV[C::kDTiles][4] = {};
  for (std::int64_t qt = q_begin, t = 0; qt < s.q_len; qt += C::kBr, ++t) {
    const int buf = static_cast<int>(t % 2);
    if (qt + C::kBr < s.q_len) {  // the next tile into the other buffer, freed by the last barrier
      load_query_tile<T, D>(tiles, rows, 1 - buf, qg, dog, lse, delta, bh, qt + C::kBr, s.q_len);
      ptx::cp_async_wait<1>();
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();
    const T *Qs = tiles + C::kQ + buf * C::kBr * C::kLd, *dOs = tiles + C::kDO + buf * C::kBr * C::kLd;
    float P[C::kQTiles][4], dS[C::kQTiles][4];
    product_nt<D, C::kQTiles>(P, Kw, Qs);    // S^T = K_w Q^T
    product_nt<D, C::kQTiles>(dS, Vw, dOs);  // dP^T = V_w dO^T
    softmax_grad<T, D>(P, dS, rows, buf, s, pad, b, qt, k0 + warp * 16);
    accumulate_pb<D, C::kBr>(dV, P, dOs);  // dV += P^T dO
    accumulate_pb<D, C::kBr>(dK, dS, Qs);  // dK += dS^T Q
#pragma unroll
    for (int n = 0; n < C::kQTiles; ++n)
      for (int i = 0; i < 4; ++i)
        dSt[((lane >> 2) + 8 * (i >> 1)) * C::kLdS + n * 8 + (lane % 4) * 2 + (i & 1)] = from_float<T>(dS[n][i]);
    __syncwarp();
    add_dq<D>(dq_accum, dSt, Kw, bh, qt, s);
    __syncthreads();  // every warp is done with this buffer (and its dS^T) before they are refilled
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t kj = k0 + warp * 16 + (lane >> 2) + 8 * (i >> 1);
    if (kj >= s.k_len) continue;
    for (int n = 0; n < C::kDTiles; ++n) {
      const std::int64_t at = (bh * s.k_len + kj) * D + n * 8 + (lane % 4) * 2 + (i & 1);
      dk[at] = from_float<T>(dK[n][i] * s.scale);
      dv[at] = from_float<T>(dV[n][i]);
    }
  }
}

template <typename T, int D>
cudaError_t backward_fa2(const void* dout, const void* q, const void* k, const void* v, const std::int32_t* pad,
                         const float* lse, const float* delta, float* dq_accum, void* dk, void* dv,
                         const AttentionShape& s, cudaStream_t stream) {
  using C = Fa2Bwd<T, D>;
  const cudaError_t err =
      cudaFuncSetAttribute(attention_fa2_backward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((s.k_len + C::kBc - 1) / C::kBc), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  attention_fa2_backward_kernel<T, D><<<grid, C::kWarps * 32, C::kBytes, stream>>>(
      static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad,
      lse, delta, dq_accum, static_cast<T*>(dk), static_cast<T*>(dv), s);
  return cudaGetLastError();
}

template <typename T>
cudaError_t forward_fa2_d(const void* q, const void* k, const void* v, const std::int32_t* pad, void* out, float* lse,
                          const AttentionShape& s, cudaStream_t stream) {
  return s.head_dim == 64 ? forward_fa2<T, 64>(q, k, v, pad, out, lse, s, stream)
                          : forward_fa2<T, 128>(q, k, v, pad, out, lse, s, stream);
}

template <typename T>
cudaError_t backward_fa2_d(const void* dout, const void* q, const void* k, const void* v, const std::int32_t* pad,
                           const float* lse, const float* delta, float* dq_accum, void* dk, void* dv,
                           const AttentionShape& s, cudaStream_t stream) {
  return s.head_dim == 64 ? backward_fa2<T, 64>(dout, q, k, v, pad, lse, delta, dq_accum, dk, dv, s, stream)
                          : backward_fa2<T, 128>(dout, q, k, v, pad, lse, delta, dq_accum, dk, dv, s, stream);
}

template <typename T>
int shared_bytes_fa2(std::int64_t head_dim, bool backward) {
  if (backward) return head_dim == 64 ? Fa2Bwd<T, 64>::kBytes : head_dim == 128 ? Fa2Bwd<T, 128>::kBytes : 0;
  return head_dim == 64 ? Fa2<T, 64>::kBytes : head_dim == 128 ? Fa2<T, 128>::kBytes : 0;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool attention_fa2_applies(const AttentionShape& s, Elem elem, const void* q, const void* k, const void* v) {
  return (elem == Elem::bf16 || s.tf32) && (s.head_dim == 64 || s.head_dim == 128) && aligned16(q) && aligned16(k) &&
         aligned16(v);
}

int attention_fa2_shared_bytes(std::int64_t head_dim, Elem elem, bool backward) {
  return elem == Elem::bf16 ? shared_bytes_fa2<bf16>(head_dim, backward) : shared_bytes_fa2<float>(head_dim, backward);
}

cudaError_t launch_attention_forward_fa2(const void* q, const void* k, const void* v, const std::int32_t* key_padding,
                                         void* out, float* lse, const AttentionShape& s, Elem elem,
                                         cudaStream_t stream) {
  return elem == Elem::bf16 ? forward_fa2_d<bf16>(q, k, v, key_padding, out, lse, s, stream)
                            : forward_fa2_d<float>(q, k, v, key_padding, out, lse, s, stream);
}

cudaError_t launch_attention_backward_fa2(const void* dout, const void* q, const void* k, const void* v,
                                          const std::int32_t* key_padding, const float* lse, const float* delta,
                                          float* dq_accum, void* dk, void* dv, const AttentionShape& s, Elem elem,
                                          cudaStream_t stream) {
  if (!aligned16(dout)) return cudaErrorMisalignedAddress;
  return elem == Elem::bf16
             ? backward_fa2_d<bf16>(dout, q, k, v, key_padding, lse, delta, dq_accum, dk, dv, s, stream)
             : backward_fa2_d<float>(dout, q, k, v, key_padding, lse, delta, dq_accum, dk, dv, s, stream);
}

}  // namespace tessera::cuda
