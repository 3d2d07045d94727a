// Flash attention, forward and backward (after Dao et al., FlashAttention-2): tiles of queries,
// keys and values in shared memory, an online softmax, the log-sum-exp of each query row saved,
// and the scores recomputed in the backward instead of stored. bfloat16 tiles multiply on the
// tensor cores (wmma, float32 accumulation); float32 tiles on the CUDA cores (the fp32 twin of
// the CPU reference). Masks: key padding, causal aligned bottom right (query i sees key j iff
// j <= i + Lk - Lq), keys beyond Lk and queries beyond Lq. The tiles use up to 124 KB of shared
// memory: sm_80 (A100) and sm_90 (H100/H200) class GPUs; sm_86/sm_89/sm_120 (99 KB) would need smaller
// ones, and get a clear error instead (cuda/attention.cpp). bfloat16 at head dims 64 and 128 goes to
// attention_fa2.cu's FlashAttention-2 kernels (mma.sync, registers-resident accumulators), and so
// does float32 there when train.tf32 allows TF32 (AttentionShape::tf32).
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"

namespace tessera::cuda {
namespace {

using namespace nvcuda;

// One warp: C (+)= A * B on shared memory. A is M x K with element (i, k) at A[i + k * lda] when
// kAColMajor, else A[i * lda + k]; B is K x N with (k, n) at B[k + n * ldb] when kBColMajor, else
// B[k * ldb + n]; C is row-major float32. For bfloat16, M, N, K are multiples of 16, the
// pointers 32-byte aligned and the leading dimensions multiples of 8 (wmma's rules).
template <typename T, bool kAColMajor, bool kBColMajor>
__device__ void warp_gemm(float* C, int ldc, const T* A, int lda, const T* B, int ldb, int M, int N, int K,
                          bool accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    using ALayout = std::conditional_t<kAColMajor, wmma::col_major, wmma::row_major>;
    using BLayout = std::conditional_t<kBColMajor, wmma::col_major, wmma::row_major>;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, ALayout> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, BLayout> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    for (int i0 = 0; i0 < M; i0 += 16) {
      for (int n0 = 0; n0 < N; n0 += 16) {
        if (accumulate)
          wmma::load_matrix_sync(c, C + i0 * ldc + n0, static_cast<unsigned>(ldc), wmma::mem_row_major);
        else
          wmma::fill_fragment(c, 0.0f);
        for (int k0 = 0; k0 < K; k0 += 16) {
          wmma::load_matrix_sync(a, kAColMajor ? A + i0 + k0 * lda : A + i0 * lda + k0, static_cast<unsigned>(lda));
          wmma::load_matrix_sync(b, kBColMajor ? B + k0 + n0 * ldb : B + k0 * ldb + n0, static_cast<unsigned>(ldb));
          wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(C + i0 * ldc + n0, c, static_cast<unsigned>(ldc), wmma::mem_row_major);
      }
    }
  } else {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    for (int idx = lane; idx < M * N; idx += 32) {
      const int i = idx / N, n = idx % N;
      float acc = accumulate ? C[i * ldc + n] : 0.0f;
      for (int k = 0; k < K; ++k)
        acc += to_float(kAColMajor ? A[i + k * lda] : A[i * lda + k]) *
               to_float(kBColMajor ? B[k + n * ldb] : B[k * ldb + n]);
      C[i * ldc + n] = acc;
    }
  }
  __syncwarp();
}

constexpr int round_up(int bytes) { return (bytes + 127) / 128 * 128; }

template <typename T>
constexpr int pad_of() {
  return sizeof(T) == 2 ? 8 : 4;  // keeps rows off the same banks and wmma's ld a multiple of 8
}

// Forward tiles: each warp owns 16 query rows; K and V tiles of kBc keys are shared.
template <typename T, int D>
struct Fwd {
  static constexpr int kWarps = sizeof(T) == 2 ? 4 : 2;
  static constexpr int kBr = 16 * kWarps, kBc = sizeof(T) == 2 ? 64 : 32;
  static constexpr int kLd = D + pad_of<T>(), kLdS = kBc + 4, kLdP = kBc + pad_of<T>(), kLdO = D + 4;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + round_up(kBr * kLd * static_cast<int>(sizeof(T)));
  static constexpr int kV = kK + round_up(kBc * kLd * static_cast<int>(sizeof(T)));
  static constexpr int kS = kV + round_up(kBc * kLd * static_cast<int>(sizeof(T)));
  static constexpr int kP = kS + round_up(kWarps * 16 * kLdS * 4);
  static constexpr int kO = kP + round_up(kWarps * 16 * kLdP * static_cast<int>(sizeof(T)));
  static constexpr int kBytes = kO + round_up(kWarps * 16 * kLdO * 4);
};

// Block-wide: rows [row0, row0 + rows) of a [len, D] matrix into a shared tile of row stride ld;
// rows past len are zeros.
template <typename T, int D>
__device__ void load_tile(T* tile, int ld, const T* __restrict__ g, std::int64_t row0, int rows, std::int64_t len) {
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * D; idx += static_cast<int>(blockDim.x)) {
    const int r = idx / D, c = idx % D;
    tile[r * ld + c] = row0 + r < len ? g[(row0 + r) * D + c] : from_float<T>(0.0f);
  }
}

// __launch_bounds__(threads, 1): without a minimum of blocks per SM ptxas trimmed the registers
// for occupancy and spilled (bf16 d 32 and 64 on sm_80); the tiles' shared memory keeps few blocks
// on an SM anyway.
template <typename T, int D>
__global__ void __launch_bounds__(Fwd<T, D>::kWarps * 32, 1)
    attention_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                             const std::int32_t* __restrict__ pad, T* __restrict__ out, float* __restrict__ lse,
                             AttentionShape s) {
  using C = Fwd<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + C::kQ);
  T* Ks = reinterpret_cast<T*>(smem + C::kK);
  T* Vs = reinterpret_cast<T*>(smem + C::kV);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float* Sw = reinterpret_cast<float*>(smem + C::kS) + warp * 16 * C::kLdS;
  T* Pw = reinterpret_cast<T*>(smem + C::kP) + warp * 16 * C::kLdP;
  float* Ow = reinterpret_cast<float*>(smem + C::kO) + warp * 16 * C::kLdO;

  // grid: (query tiles, heads, batch): y and z each stay under 65535 for any batch x heads.
  const std::int64_t b = blockIdx.z, bh = b * s.heads + blockIdx.y, q0 = static_cast<std::int64_t>(blockIdx.x) * C::kBr;
  const T* qg = q + bh * s.q_len * D;
  const T* kg = k + bh * s.k_rows * D;  // a decoder cache holds k_rows >= k_len positions
  const T* vg = v + bh * s.k_rows * D;
  load_tile<T, D>(Qs, C::kLd, qg, q0, C::kBr, s.q_len);
  for (int idx = lane; idx < 16 * D; idx += 32) Ow[(idx / D) * C::kLdO + idx % D] = 0.0f;
  __syncwarp();  // the epilogue reads other lanes' zeros when no key tile runs

  // Lane layout of the softmax: row r of the warp's 16, half h of the tile's columns (and of D).
  const int r = lane / 2, h = lane % 2;
  constexpr int kHalf = C::kBc / 2;
  const std::int64_t qi = q0 + warp * 16 + r;
  float m = -INFINITY, l = 0.0f;
  const std::int64_t k_end = attention_key_end(s, q0, C::kBr);
  for (std::int64_t k0 = 0; k0 < k_end; k0 += C::kBc) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile<T, D>(Ks, C::kLd, kg, k0, C::kBc, s.k_len);
    load_tile<T, D>(Vs, C::kLd, vg, k0, C::kBc, s.k_len);
    __syncthreads();
    warp_gemm<T, false, true>(Sw, C::kLdS, Qs + warp * 16 * C::kLd, C::kLd, Ks, C::kLd, 16, C::kBc, D, false);
    float sv[kHalf];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
      const int col = h * kHalf + j;
      sv[j] = attention_visible(s, pad, b, qi, k0 + col) ? Sw[r * C::kLdS + col] * s.scale : -INFINITY;
      tile_max = max_keeping_nan(tile_max, sv[j]);
    }
    tile_max = max_keeping_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = max_keeping_nan(m, tile_max);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
    float row_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
      const float p = sv[j] == -INFINITY ? 0.0f : expf(sv[j] - m_new);
      row_sum += p;
      Pw[r * C::kLdP + h * kHalf + j] = from_float<T>(p);
    }
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
    l = l * alpha + row_sum;
    m = m_new;
    for (int c = h * (D / 2); c < (h + 1) * (D / 2); ++c) Ow[r * C::kLdO + c] *= alpha;
    __syncwarp();
    warp_gemm<T, false, false>(Ow, C::kLdO, Pw, C::kLdP, Vs, C::kLd, 16, D, C::kBc, true);
  }
  if (qi < s.q_len) {
    // A row that sees no key (l = 0): out 0, lse -inf. A NaN score made l NaN: out and lse NaN.
    const bool seen = l != 0.0f;
    const float inv = seen ? 1.0f / l : 0.0f;
    T* og = out + (bh * s.q_len + qi) * D;
    for (int c = h * (D / 2); c < (h + 1) * (D / 2); ++c)
      og[c] = seen ? from_float<T>(Ow[r * C::kLdO + c] * inv) : from_float<T>(0.0f);
    if (h == 0) lse[bh * s.q_len + qi] = seen ? m + logf(l) : -INFINITY;
  }
}

// delta[row] = sum_c dout[row, c] * out[row, c]: the backward's softmax correction. A warp a row.
template <typename T, int D>
__global__ void attention_delta_kernel(const T* __restrict__ dout, const T* __restrict__ out, float* __restrict__ delta,
                                       std::int64_t rows) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float sum = 0.0f;
  for (int c = lane; c < D; c += 32) sum += to_float(dout[row * D + c]) * to_float(out[row * D + c]);
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

// Backward tiles: a block owns kBc keys (16 per warp) and walks over the query tiles; dK and dV
// accumulate in shared memory, dQ goes to a float32 buffer with atomicAdd.
template <typename T, int D>
struct Bwd {
  static constexpr int kWarpsWanted = (sizeof(T) == 2 ? 4 : 2) * 64 / D;
  static constexpr int kWarps = kWarpsWanted < 1 ? 1 : (kWarpsWanted > 4 ? 4 : kWarpsWanted);
  static constexpr int kBc = 16 * kWarps, kBr = 32;
  static constexpr int kLd = D + pad_of<T>(), kLdS = kBr + 4, kLdP = kBr + pad_of<T>(), kLdA = D + 4;
  static constexpr int kK = 0;
  static constexpr int kV = kK + round_up(kBc * kLd * static_cast<int>(sizeof(T)));
  static constexpr int kQ = kV + round_up(kBc * kLd * static_cast<int>(sizeof(T)));
  static constexpr int kDO = kQ + round_up(kBr * kLd * static_cast<int>(sizeof(T)));
  static constexpr int kLse = kDO + round_up(kBr * kLd * static_cast<int>(sizeof(T)));
  static constexpr int kDelta = kLse + round_up(kBr * 4);
  static constexpr int kSt = kDelta + round_up(kBr * 4);               // per warp [16][kLdS] float: P^T
  static constexpr int kDPt = kSt + round_up(kWarps * 16 * kLdS * 4);  // per warp: dP^T
  static constexpr int kPt = kDPt + round_up(kWarps * 16 * kLdS * 4);  // per warp [16][kLdP] T: P^T
  static constexpr int kDSt = kPt + round_up(kWarps * 16 * kLdP * static_cast<int>(sizeof(T)));  // dS^T
  static constexpr int kDK = kDSt + round_up(kWarps * 16 * kLdP * static_cast<int>(sizeof(T)));
  static constexpr int kDV = kDK + round_up(kWarps * 16 * kLdA * 4);
  static constexpr int kDQ = kDV + round_up(kWarps * 16 * kLdA * 4);  // per warp [kBr][kLdA] float
  static constexpr int kBytes = kDQ + round_up(kWarps * kBr * kLdA * 4);
};

// __launch_bounds__(threads, 1) as the forward's (without it: a spill in float32 d 32 on sm_90).
template <typename T, int D>
__global__ void __launch_bounds__(Bwd<T, D>::kWarps * 32, 1)
    attention_backward_kernel(const T* __restrict__ dout, const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const std::int32_t* __restrict__ pad,
                              const float* __restrict__ lse, const float* __restrict__ delta,
                              float* __restrict__ dq_accum, T* __restrict__ dk, T* __restrict__ dv, AttentionShape s) {
  using C = Bwd<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  T* Ks = reinterpret_cast<T*>(smem + C::kK);
  T* Vs = reinterpret_cast<T*>(smem + C::kV);
  T* Qs = reinterpret_cast<T*>(smem + C::kQ);
  T* dOs = reinterpret_cast<T*>(smem + C::kDO);
  float* lse_s = reinterpret_cast<float*>(smem + C::kLse);
  float* delta_s = reinterpret_cast<float*>(smem + C::kDelta);
  float* St = reinterpret_cast<float*>(smem + C::kSt) + warp * 16 * C::kLdS;
  float* dPt = reinterpret_cast<float*>(smem + C::kDPt) + warp * 16 * C::kLdS;
  T* Pt = reinterpret_cast<T*>(smem + C::kPt) + warp * 16 * C::kLdP;
  T* dSt = reinterpret_cast<T*>(smem + C::kDSt) + warp * 16 * C::kLdP;
  float* dKw = reinterpret_cast<float*>(smem + C::kDK) + warp * 16 * C::kLdA;
  float* dVw = reinterpret_cast<float*>(smem + C::kDV) + warp * 16 * C::kLdA;
  float* dQ_all = reinterpret_cast<float*>(smem + C::kDQ);
  float* dQw = dQ_all + warp * C::kBr * C::kLdA;

  const std::int64_t b = blockIdx.z, bh = b * s.heads + blockIdx.y, k0 = static_cast<std::int64_t>(blockIdx.x) * C::kBc;
  const T* kg = k + bh * s.k_len * D;
  const T* vg = v + bh * s.k_len * D;
  const T* qg = q + bh * s.q_len * D;
  const T* dog = dout + bh * s.q_len * D;
  load_tile<T, D>(Ks, C::kLd, kg, k0, C::kBc, s.k_len);
  load_tile<T, D>(Vs, C::kLd, vg, k0, C::kBc, s.k_len);
  for (int idx = lane; idx < 16 * D; idx += 32) {
    dKw[(idx / D) * C::kLdA + idx % D] = 0.0f;
    dVw[(idx / D) * C::kLdA + idx % D] = 0.0f;
  }
  const T* Kw = Ks + warp * 16 * C::kLd;
  const T* Vw = Vs + warp * 16 * C::kLd;
  // Causal: queries before k0 - (Lk - Lq) see none of this block's keys.
  std::int64_t q_begin = s.causal ? k0 - (s.k_len - s.q_len) : 0;
  q_begin = q_begin > 0 ? q_begin / C::kBr * C::kBr : 0;
  for (std::int64_t qt = q_begin; qt < s.q_len; qt += C::kBr) {
    __syncthreads();  // the previous query tile and dQ partials are no longer read
    load_tile<T, D>(Qs, C::kLd, qg, qt, C::kBr, s.q_len);
    load_tile<T, D>(dOs, C::kLd, dog, qt, C::kBr, s.q_len);
    for (int r = static_cast<int>(threadIdx.x); r < C::kBr; r += static_cast<int>(blockDim.x)) {
      const bool in = qt + r < s.q_len;
      lse_s[r] = in ? lse[bh * s.q_len + qt + r] : -INFINITY;
      delta_s[r] = in ? delta[bh * s.q_len + qt + r] : 0.0f;
    }
    __syncthreads();
    // S^T = K_w Q^T, then P^T = exp(scale * S^T - lse) where visible.
    warp_gemm<T, false, true>(St, C::kLdS, Kw, C::kLd, Qs, C::kLd, 16, C::kBr, D, false);
    for (int idx = lane; idx < 16 * C::kBr; idx += 32) {
      const int kk = idx / C::kBr, qq = idx % C::kBr;
      const bool ok = lse_s[qq] != -INFINITY && attention_visible(s, pad, b, qt + qq, k0 + warp * 16 + kk);
      const float p = ok ? expf(St[kk * C::kLdS + qq] * s.scale - lse_s[qq]) : 0.0f;
      St[kk * C::kLdS + qq] = p;
      Pt[kk * C::kLdP + qq] = from_float<T>(p);
    }
    __syncwarp();
    warp_gemm<T, false, false>(dVw, C::kLdA, Pt, C::kLdP, dOs, C::kLd, 16, D, C::kBr, true);  // dV += P^T dO
    warp_gemm<T, false, true>(dPt, C::kLdS, Vw, C::kLd, dOs, C::kLd, 16, C::kBr, D, false);   // dP^T = V dO^T
    for (int idx = lane; idx < 16 * C::kBr; idx += 32) {
      const int kk = idx / C::kBr, qq = idx % C::kBr;
      dSt[kk * C::kLdP + qq] = from_float<T>(St[kk * C::kLdS + qq] * (dPt[kk * C::kLdS + qq] - delta_s[qq]));
    }
    __syncwarp();
    warp_gemm<T, false, false>(dKw, C::kLdA, dSt, C::kLdP, Qs, C::kLd, 16, D, C::kBr, true);  // dK += dS^T Q
    warp_gemm<T, true, false>(dQw, C::kLdA, dSt, C::kLdP, Kw, C::kLd, C::kBr, D, 16, false);  // dQ_w = dS K_w
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < C::kBr * D; idx += static_cast<int>(blockDim.x)) {
      const int qq = idx / D, c = idx % D;
      if (qt + qq >= s.q_len) continue;
      float sum = 0.0f;
      for (int w = 0; w < C::kWarps; ++w) sum += dQ_all[w * C::kBr * C::kLdA + qq * C::kLdA + c];
      atomicAdd(&dq_accum[(bh * s.q_len + qt + qq) * D + c], sum * s.scale);
    }
  }
  for (int idx = lane; idx < 16 * D; idx += 32) {
    const int kk = idx / D, c = idx % D;
    const std::int64_t kj = k0 + warp * 16 + kk;
    if (kj >= s.k_len) continue;
    dk[(bh * s.k_len + kj) * D + c] = from_float<T>(dKw[kk * C::kLdA + c] * s.scale);
    dv[(bh * s.k_len + kj) * D + c] = from_float<T>(dVw[kk * C::kLdA + c]);
  }
}

template <typename Kernel>
cudaError_t allow_shared(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <typename T, int D>
cudaError_t forward(const void* q, const void* k, const void* v, const std::int32_t* pad, void* out, float* lse,
                    const AttentionShape& s, cudaStream_t stream) {
  using C = Fwd<T, D>;
  const cudaError_t err = allow_shared(attention_forward_kernel<T, D>, C::kBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((s.q_len + C::kBr - 1) / C::kBr), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  attention_forward_kernel<T, D><<<grid, C::kWarps * 32, C::kBytes, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad, static_cast<T*>(out), lse, s);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t backward(const void* dout, const void* q, const void* k, const void* v, const std::int32_t* pad,
                     const void* out, const float* lse, float* dq_accum, float* delta, void* dq, void* dk, void* dv,
                     const AttentionShape& s, Elem elem, cudaStream_t stream) {
  using C = Bwd<T, D>;
  const std::int64_t rows = s.batch * s.heads * s.q_len;
  cudaError_t err = cudaMemsetAsync(dq_accum, 0, static_cast<std::size_t>(rows * D) * sizeof(float), stream);
  if (err != cudaSuccess) return err;
  if (s.k_len == 0) return launch_cast(dq_accum, Elem::f32, dq, elem, rows * D, stream);  // no key: dq = 0
  if (rows > 0) {
    attention_delta_kernel<T, D><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<const T*>(dout), static_cast<const T*>(out), delta, rows);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  if (attention_fa2_applies(s, elem, q, k, v) &&
      reinterpret_cast<std::uintptr_t>(dout) % 16 == 0) {  // attention_fa2.cu
    err = launch_attention_backward_fa2(dout, q, k, v, pad, lse, delta, dq_accum, dk, dv, s, elem, stream);
    if (err != cudaSuccess) return err;
    return launch_cast(dq_accum, Elem::f32, dq, elem, rows * D, stream);
  }
  if ((err = allow_shared(attention_backward_kernel<T, D>, C::kBytes)) != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((s.k_len + C::kBc - 1) / C::kBc), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  attention_backward_kernel<T, D><<<grid, C::kWarps * 32, C::kBytes, stream>>>(
      static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad,
      lse, delta, dq_accum, static_cast<T*>(dk), static_cast<T*>(dv), s);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  return launch_cast(dq_accum, Elem::f32, dq, elem, rows * D, stream);
}

template <typename T>
cudaError_t forward_d(const void* q, const void* k, const void* v, const std::int32_t* pad, void* out, float* lse,
                      const AttentionShape& s, cudaStream_t stream) {
  const Elem elem = std::is_same_v<T, float> ? Elem::f32 : Elem::bf16;
  if (attention_fa2_applies(s, elem, q, k, v))
    return launch_attention_forward_fa2(q, k, v, pad, out, lse, s, elem, stream);  // attention_fa2.cu
  switch (s.head_dim) {
    case 32:
      return forward<T, 32>(q, k, v, pad, out, lse, s, stream);
    case 64:
      return forward<T, 64>(q, k, v, pad, out, lse, s, stream);
    case 128:
      return forward<T, 128>(q, k, v, pad, out, lse, s, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t backward_d(const void* dout, const void* q, const void* k, const void* v, const std::int32_t* pad,
                       const void* out, const float* lse, float* dq_accum, float* delta, void* dq, void* dk, void* dv,
                       const AttentionShape& s, Elem elem, cudaStream_t stream) {
  switch (s.head_dim) {
    case 32:
      return backward<T, 32>(dout, q, k, v, pad, out, lse, dq_accum, delta, dq, dk, dv, s, elem, stream);
    case 64:
      return backward<T, 64>(dout, q, k, v, pad, out, lse, dq_accum, delta, dq, dk, dv, s, elem, stream);
    case 128:
      return backward<T, 128>(dout, q, k, v, pad, out, lse, dq_accum, delta, dq, dk, dv, s, elem, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T, int D>
int shared_bytes_of(bool backward) {
  return backward ? Bwd<T, D>::kBytes : Fwd<T, D>::kBytes;
}

template <typename T>
int shared_bytes_d(std::int64_t head_dim, bool backward) {
  switch (head_dim) {
    case 32:
      return shared_bytes_of<T, 32>(backward);
    case 64:
      return shared_bytes_of<T, 64>(backward);
    case 128:
      return shared_bytes_of<T, 128>(backward);
    default:
      return 0;
  }
}

bool launchable(const AttentionShape& s) { return s.batch <= 65535 && s.heads <= 65535; }

}  // namespace

bool attention_supports_head_dim(std::int64_t head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }

int attention_shared_bytes(std::int64_t head_dim, Elem elem, bool backward, bool tf32) {
  const int tiles = elem == Elem::bf16 ? shared_bytes_d<__nv_bfloat16>(head_dim, backward)
                                       : shared_bytes_d<float>(head_dim, backward);  // the fallback's, when unaligned
  if (elem == Elem::f32 && !tf32) return tiles;
  return std::max(tiles, attention_fa2_shared_bytes(head_dim, elem, backward));
}

cudaError_t launch_attention_forward(const void* q, const void* k, const void* v, const std::int32_t* key_padding,
                                     void* out, float* lse, const AttentionShape& s, Elem elem, cudaStream_t stream) {
  if (s.batch * s.heads * s.q_len == 0) return cudaSuccess;
  if (!launchable(s)) return cudaErrorInvalidConfiguration;
  return elem == Elem::bf16 ? forward_d<__nv_bfloat16>(q, k, v, key_padding, out, lse, s, stream)
                            : forward_d<float>(q, k, v, key_padding, out, lse, s, stream);
}

cudaError_t launch_attention_backward(const void* dout, const void* q, const void* k, const void* v,
                                      const std::int32_t* key_padding, const void* out, const float* lse,
                                      float* dq_accum, float* delta, void* dq, void* dk, void* dv,
                                      const AttentionShape& s, Elem elem, cudaStream_t stream) {
  if (s.batch * s.heads * (s.q_len + s.k_len) == 0) return cudaSuccess;
  if (!launchable(s)) return cudaErrorInvalidConfiguration;
  return elem == Elem::bf16
             ? backward_d<__nv_bfloat16>(dout, q, k, v, key_padding, out, lse, dq_accum, delta, dq, dk, dv, s, elem,
                                         stream)
             : backward_d<float>(dout, q, k, v, key_padding, out, lse, dq_accum, delta, dq, dk, dv, s, elem, stream);
}

}  // namespace tessera::cuda
