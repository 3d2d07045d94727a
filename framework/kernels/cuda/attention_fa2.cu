// Flash attention forward in the FlashAttention-2 design, bfloat16, head dims 64 and 128: a block
// of 4 warps owns 64 query rows (16 a warp) and walks the key tiles (64 keys) once. The output
// accumulator O and each row's running max m and sum l stay in registers (the mma.sync
// accumulator fragments); Q, K and V tiles come through shared memory by cp.async, the next K/V
// tile loading while the current one is multiplied (two buffers); the tensor cores take their
// operands by ldmatrix (V transposed on the way) and multiply with mma.sync m16n8k16. The score
// fragments are the P operand of P V without a trip through shared memory (the C layout of two
// 16 x 8 tiles is the A layout of one 16 x 16). Masks and results as attention.cu's kernel (the
// CPU twin's): key padding, causal aligned bottom right, keys past Lk, queries past Lq.
// float32 attention and head dim 32 stay on attention.cu's kernel (float32 on the CUDA cores).
#include <cstdint>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/mma.cuh"

namespace tessera::cuda {
namespace {

using bf16 = __nv_bfloat16;

template <int D>
struct Fa2 {
  static constexpr int kWarps = 4, kBr = 16 * kWarps, kBc = 64;
  static constexpr int kLd = D + 8;  // 16 bytes of padding: ldmatrix's 8 rows hit distinct banks
  static constexpr int kQ = 0, kK = kBr * kLd, kV = kK + 2 * kBc * kLd;  // in elements; K, V: 2 buffers
  static constexpr int kBytes = (kV + 2 * kBc * kLd) * 2;
  static constexpr int kScoreTiles = kBc / 8, kOutTiles = D / 8;
};

// Block-wide, asynchronous: rows [row0, row0 + rows) of a [len, D] matrix into a shared tile;
// rows past len are zero-filled.
template <int D>
__device__ void copy_rows(bf16* tile, const bf16* g, std::int64_t row0, int rows, std::int64_t len) {
  constexpr int kChunks = D / 8;  // 16 bytes each
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * kChunks; idx += static_cast<int>(blockDim.x)) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool in = row0 + r < len;
    ptx::cp_async_16(tile + r * Fa2<D>::kLd + c * 8, in ? g + (row0 + r) * D + c * 8 : g, in ? 16 : 0);
  }
}

// S (this warp's 16 rows x kBc keys, accumulator fragments) = Q_w K^T.
template <int D>
__device__ void scores(float (&S)[Fa2<D>::kScoreTiles][4], const bf16* Qw, const bf16* Ks) {
  using C = Fa2<D>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (auto& t : S)
    for (float& x : t) x = 0.0f;
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    std::uint32_t a[4];
    ptx::ldmatrix_x4<false>(a, Qw + (lane % 16) * C::kLd + k0 + (lane / 16) * 8);
#pragma unroll
    for (int n = 0; n < C::kScoreTiles; n += 2) {
      std::uint32_t b[4];  // b[0..1]: keys n * 8.., b[2..3]: the next 8 keys
      ptx::ldmatrix_x4<false>(b, Ks + (n * 8 + (lane / 16) * 8 + lane % 8) * C::kLd + k0 + ((lane / 8) % 2) * 8);
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ptx::mma_bf16_16x8x16(S[n], a, b0, S[n]);
      ptx::mma_bf16_16x8x16(S[n + 1], a, b1, S[n + 1]);
    }
  }
}

// Row state of one lane: rows groupID (h = 0) and groupID + 8 (h = 1) of the warp's 16.
struct RowState {
  float m[2], l[2];  // l: this lane's part of the row sum (its columns), summed over the group at the end
};

// Masks and scales S, updates m and l, rescales O, and turns S into P = exp(S - m) in place.
template <int D>
__device__ void online_softmax(float (&S)[Fa2<D>::kScoreTiles][4], float (&O)[Fa2<D>::kOutTiles][4], RowState& st,
                               const AttentionShape& s, const std::int32_t* pad, std::int64_t b, std::int64_t row0,
                               std::int64_t k0) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::int64_t qi = row0 + (lane >> 2) + 8 * h;
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < Fa2<D>::kScoreTiles; ++n)
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
    for (int n = 0; n < Fa2<D>::kScoreTiles; ++n)
      for (int i = 2 * h; i < 2 * h + 2; ++i) {
        S[n][i] = S[n][i] == -INFINITY ? 0.0f : expf(S[n][i] - m_new);
        sum += S[n][i];
      }
    st.l[h] = st.l[h] * alpha + sum;
    st.m[h] = m_new;
#pragma unroll
    for (int n = 0; n < Fa2<D>::kOutTiles; ++n) {
      O[n][2 * h] *= alpha;
      O[n][2 * h + 1] *= alpha;
    }
  }
}

// O += P V: P from the score fragments (rounded to bfloat16), V by ldmatrix.trans.
template <int D>
__device__ void accumulate_pv(float (&O)[Fa2<D>::kOutTiles][4], const float (&P)[Fa2<D>::kScoreTiles][4],
                              const bf16* Vs) {
  using C = Fa2<D>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int kk = 0; kk < C::kBc / 16; ++kk) {
    // A fragment of keys 16 kk..: registers (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8).
    const std::uint32_t a[4] = {ptx::pack_bf16(P[2 * kk][0], P[2 * kk][1]), ptx::pack_bf16(P[2 * kk][2], P[2 * kk][3]),
                                ptx::pack_bf16(P[2 * kk + 1][0], P[2 * kk + 1][1]),
                                ptx::pack_bf16(P[2 * kk + 1][2], P[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < C::kOutTiles; n += 2) {
      std::uint32_t b[4];  // b[0..1]: columns n * 8.., b[2..3]: the next 8
      ptx::ldmatrix_x4<true>(b, Vs + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * C::kLd + n * 8 + (lane / 16) * 8);
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ptx::mma_bf16_16x8x16(O[n], a, b0, O[n]);
      ptx::mma_bf16_16x8x16(O[n + 1], a, b1, O[n + 1]);
    }
  }
}

// out = O / l and lse = m + log l for the lane's two rows; a row that sees no key gets 0 and -inf.
template <int D>
__device__ void write_rows(const float (&O)[Fa2<D>::kOutTiles][4], RowState& st, bf16* out, float* lse, std::int64_t bh,
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
    bf16* og = out + (bh * q_len + qi) * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < Fa2<D>::kOutTiles; ++n) {
      og[n * 8] = from_float<bf16>(seen ? O[n][2 * h] * inv : 0.0f);
      og[n * 8 + 1] = from_float<bf16>(seen ? O[n][2 * h + 1] * inv : 0.0f);
    }
    if (lane % 4 == 0) lse[bh * q_len + qi] = seen ? st.m[h] + logf(l) : -INFINITY;
  }
}

template <int D>
__global__ void __launch_bounds__(Fa2<D>::kWarps * 32)
    attention_fa2_forward_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                                 const std::int32_t* __restrict__ pad, bf16* __restrict__ out, float* __restrict__ lse,
                                 AttentionShape s) {
  using C = Fa2<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* tiles = reinterpret_cast<bf16*>(smem);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  // grid: (query tiles, heads, batch), as attention.cu's kernel.
  const std::int64_t b = blockIdx.z, bh = b * s.heads + blockIdx.y, q0 = static_cast<std::int64_t>(blockIdx.x) * C::kBr;
  const bf16 *kg = k + bh * s.k_len * D, *vg = v + bh * s.k_len * D;
  const int tiles_n = static_cast<int>((attention_key_end(s, q0, C::kBr) + C::kBc - 1) / C::kBc);
  float O[C::kOutTiles][4] = {};
  RowState st{{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
  if (tiles_n > 0) {
    copy_rows<D>(tiles + C::kQ, q + bh * s.q_len * D, q0, C::kBr, s.q_len);
    copy_rows<D>(tiles + C::kK, kg, 0, C::kBc, s.k_len);
    copy_rows<D>(tiles + C::kV, vg, 0, C::kBc, s.k_len);
    ptx::cp_async_commit();
  }
  for (int t = 0; t < tiles_n; ++t) {
    const int buf = t % 2;
    if (t + 1 < tiles_n) {  // the next tile into the other buffer, freed by the last iteration's barrier
      const std::int64_t next = static_cast<std::int64_t>(t + 1) * C::kBc;
      copy_rows<D>(tiles + C::kK + (1 - buf) * C::kBc * C::kLd, kg, next, C::kBc, s.k_len);
      copy_rows<D>(tiles + C::kV + (1 - buf) * C::kBc * C::kLd, vg, next, C::kBc, s.k_len);
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();  // this tile's group has landed; the next one may still fly
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of this tile are visible
    float S[C::kScoreTiles][4];
    scores<D>(S, tiles + C::kQ + warp * 16 * C::kLd, tiles + C::kK + buf * C::kBc * C::kLd);
    online_softmax<D>(S, O, st, s, pad, b, q0 + warp * 16, static_cast<std::int64_t>(t) * C::kBc);
    accumulate_pv<D>(O, S, tiles + C::kV + buf * C::kBc * C::kLd);
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  write_rows<D>(O, st, out, lse, bh, q0 + warp * 16, s.q_len);
}

template <int D>
cudaError_t forward_fa2(const void* q, const void* k, const void* v, const std::int32_t* pad, void* out, float* lse,
                        const AttentionShape& s, cudaStream_t stream) {
  using C = Fa2<D>;
  const cudaError_t err =
      cudaFuncSetAttribute(attention_fa2_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((s.q_len + C::kBr - 1) / C::kBr), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  attention_fa2_forward_kernel<D>
      <<<grid, C::kWarps * 32, C::kBytes, stream>>>(static_cast<const bf16*>(q), static_cast<const bf16*>(k),
                                                    static_cast<const bf16*>(v), pad, static_cast<bf16*>(out), lse, s);
  return cudaGetLastError();
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool attention_fa2_applies(std::int64_t head_dim, Elem elem, const void* q, const void* k, const void* v) {
  return elem == Elem::bf16 && (head_dim == 64 || head_dim == 128) && aligned16(q) && aligned16(k) && aligned16(v);
}

int attention_fa2_shared_bytes(std::int64_t head_dim) {
  return head_dim == 64 ? Fa2<64>::kBytes : head_dim == 128 ? Fa2<128>::kBytes : 0;
}

cudaError_t launch_attention_forward_fa2(const void* q, const void* k, const void* v, const std::int32_t* key_padding,
                                         void* out, float* lse, const AttentionShape& s, cudaStream_t stream) {
  return s.head_dim == 64 ? forward_fa2<64>(q, k, v, key_padding, out, lse, s, stream)
                          : forward_fa2<128>(q, k, v, key_padding, out, lse, s, stream);
}

}  // namespace tessera::cuda
