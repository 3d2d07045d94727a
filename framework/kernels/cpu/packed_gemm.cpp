#include "kernels/cpu/packed_gemm.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "common/error.h"

namespace tessera::cpu {

void PackedWeight::Free::operator()(float* p) const { std::free(p); }

PackedWeight::PackedWeight(const Tensor& w) : n_(w.size(0)), k_(w.size(1)) {
  TESSERA_CHECK(w.dim() == 2 && w.dtype() == DType::f32 && w.device() == Device::cpu,
                "packed weight: expected a 2-D float32 CPU tensor, got {}", w.describe());
  pack(w.data<float>(), k_, true);
}

PackedWeight::PackedWeight(const float* b, std::int64_t n, std::int64_t k, std::int64_t ldb, bool b_is_w)
    : n_(n), k_(k) {
  pack(b, ldb, b_is_w);
}

namespace {
#if defined(__AVX512F__)
// The masks of a panel's first `cols` columns (1 to 32) in its two vectors.
std::pair<__mmask16, __mmask16> column_masks(std::int64_t cols) {
  return {static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1),
          static_cast<__mmask16>(cols >= 32   ? 0xFFFF
                                 : cols <= 16 ? 0
                                              : (1u << (cols - 16)) - 1)};
}
#endif

// One panel of PackedWeight from `cols` (1 to kPanel) rows of W (rows_are_columns: src[j * ld + k])
// or columns of B (src[k * ld + j]), zeros past them.
void pack_panel(const float* src, std::int64_t ld, bool rows_are_columns, std::int64_t depth, std::int64_t cols,
                float* out) {
  constexpr std::int64_t kPanel = PackedWeight::kPanel;
#if defined(__AVX512F__)
  const auto [lo, hi] = column_masks(cols);
  const __m512 zero = _mm512_setzero_ps();
  if (!rows_are_columns) {
    for (std::int64_t k = 0; k < depth; ++k) {
      _mm512_store_ps(out + k * kPanel, _mm512_maskz_loadu_ps(lo, src + k * ld));
      _mm512_store_ps(out + k * kPanel + 16, hi ? _mm512_maskz_loadu_ps(hi, src + k * ld + 16) : zero);
    }
    return;
  }
  if (ld <= (std::int64_t{1} << 31) / kPanel) {  // the rows' offsets fit the gather's 32-bit indices
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(static_cast<int>(ld)));
    for (std::int64_t k = 0; k < depth; ++k) {
      _mm512_store_ps(out + k * kPanel, _mm512_mask_i32gather_ps(zero, lo, rows, src + k, 4));
      _mm512_store_ps(out + k * kPanel + 16,
                      hi ? _mm512_mask_i32gather_ps(zero, hi, rows, src + 16 * ld + k, 4) : zero);
    }
    return;
  }
#endif
  for (std::int64_t k = 0; k < depth; ++k) {
    float* o = out + k * kPanel;
    for (std::int64_t j = 0; j < cols; ++j) o[j] = rows_are_columns ? src[j * ld + k] : src[k * ld + j];
    for (std::int64_t j = cols; j < kPanel; ++j) o[j] = 0.0f;
  }
}
}  // namespace

void PackedWeight::pack(const float* src, std::int64_t ld, bool rows_are_columns) {
  const std::size_t bytes = static_cast<std::size_t>(panels() * kPanel * k_) * sizeof(float);
  data_.reset(static_cast<float*>(std::aligned_alloc(64, std::max<std::size_t>(64, (bytes + 63) / 64 * 64))));
  TESSERA_CHECK(data_ != nullptr, "packed weight: out of host memory packing [{}, {}]", n_, k_);
  const bool threads = !omp_in_parallel() && panels() > 1 && n_ * k_ >= (1 << 18);
#pragma omp parallel for schedule(static) if (threads)
  for (std::int64_t p = 0; p < panels(); ++p)
    pack_panel(src + p * kPanel * (rows_are_columns ? ld : 1), ld, rows_are_columns, k_,
               std::min(kPanel, n_ - p * kPanel), data_.get() + p * kPanel * k_);
}

#if defined(__AVX512F__)
bool packed_gemm_available() { return true; }

namespace {

constexpr std::int64_t kMaxRows = 12;  // 12 rows x 2 vectors: 24 accumulators of the 32 registers

// c[MR, 32 or fewer (mask)] (+)= a[MR, k] panel^T: per element one chain of fused multiply-adds,
// from 0 or, when accumulating, from c. Element (i, kk) of a: a[i * lda + kk], or with kPackedA
// a[kk * lda + i] (a's columns packed by pack_columns_of_a, lda = kMaxRows).
template <int MR, bool kPackedA>
void micro_kernel(const float* a, std::int64_t lda, const float* panel, std::int64_t k, float* c, std::int64_t ldc,
                  __mmask16 mask_lo, __mmask16 mask_hi, bool accumulate) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = accumulate ? _mm512_maskz_loadu_ps(mask_lo, c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = accumulate ? _mm512_maskz_loadu_ps(mask_hi, c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const __m512 b0 = _mm512_load_ps(panel + kk * PackedWeight::kPanel);
    const __m512 b1 = _mm512_load_ps(panel + kk * PackedWeight::kPanel + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(kPackedA ? a[kk * lda + i] : a[i * lda + kk]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, mask_lo, acc[i][0]);
    _mm512_mask_storeu_ps(c + i * ldc + 16, mask_hi, acc[i][1]);
  }
}

using MicroKernel = void (*)(const float*, std::int64_t, const float*, std::int64_t, float*, std::int64_t, __mmask16,
                             __mmask16, bool);

template <bool kPackedA, int... R>
constexpr auto micro_kernels(std::integer_sequence<int, R...>) {
  return std::array<MicroKernel, sizeof...(R)>{&micro_kernel<R + 1, kPackedA>...};
}

// The micro-kernel for `rows` rows (1 to kMaxRows) of a read in place or packed.
template <bool kPackedA = false>
MicroKernel kernel_for(int rows) {
  static constexpr auto kernels = micro_kernels<kPackedA>(std::make_integer_sequence<int, kMaxRows>{});
  return kernels[static_cast<std::size_t>(rows - 1)];
}

// Runs micro(r, p, mask_lo, mask_hi) for row blocks r (from 0, kMaxRows apart) of m rows and the
// panels [p0, p1) of w, row block by row block.
template <typename Micro>
void for_each_tile(std::int64_t m, const PackedWeight& w, std::int64_t p0, std::int64_t p1, const Micro& micro) {
  for (std::int64_t r = 0; r < m; r += kMaxRows)
    for (std::int64_t p = p0; p < p1; ++p) {
      const auto [lo, hi] =
          column_masks(std::min<std::int64_t>(PackedWeight::kPanel, w.n() - p * PackedWeight::kPanel));
      micro(r, p, lo, hi);
    }
}

// Runs task(r0, rows, p0, p1) over chunks of m's rows and blocks of w's panels (about 256 KiB of
// packed weight, which stays in L2 while its row chunks pass), on the threads when it pays.
template <typename Task>
void for_each_chunk(std::int64_t m, const PackedWeight& w, const Task& task) {
  const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{64} << 10) / (w.k() * PackedWeight::kPanel));
  const std::int64_t blocks = (w.panels() + block - 1) / block;
  constexpr std::int64_t kChunk = 16 * kMaxRows;
  const std::int64_t chunks = (m + kChunk - 1) / kChunk;
  const bool threads =
      !omp_in_parallel() && omp_get_max_threads() > 1 && blocks * chunks > 1 && m * w.n() * w.k() >= (1 << 20);
#pragma omp parallel for collapse(2) schedule(static) if (threads)
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t r = 0; r < chunks; ++r)
      task(r * kChunk, std::min(kChunk, m - r * kChunk), b * block, std::min(w.panels(), (b + 1) * block));
}

}  // namespace

namespace {
// The epilogue on c's tile of `rows` rows and one panel's columns (masks lo, hi), from column col0.
void apply_epilogue(const GemmEpilogue& e, float* c, std::int64_t ldc, int rows, std::int64_t col0, __mmask16 lo,
                    __mmask16 hi) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 b0 = e.bias ? _mm512_maskz_loadu_ps(lo, e.bias + col0) : zero;
  const __m512 b1 = e.bias ? _mm512_maskz_loadu_ps(hi, e.bias + col0 + 16) : zero;
  const auto store = [&](float* y, __mmask16 mask, __m512 b) {
    __m512 v = _mm512_maskz_loadu_ps(mask, y);
    if (e.bias) v = _mm512_add_ps(v, b);
    if (e.relu) v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_NLE_UQ), v);  // x > 0 or NaN: x; else +0
    _mm512_mask_storeu_ps(y, mask, v);
  };
  for (int i = 0; i < rows; ++i) {
    store(c + i * ldc, lo, b0);
    store(c + i * ldc + 16, hi, b1);
  }
}
}  // namespace

void packed_gemm_nt(std::int64_t m, const float* a, std::int64_t lda, const PackedWeight& w, float* c, std::int64_t ldc,
                    const GemmEpilogue& epilogue) {
  const bool has_epilogue = epilogue.bias != nullptr || epilogue.relu;
  for_each_chunk(m, w, [&](std::int64_t r0, std::int64_t rows, std::int64_t p0, std::int64_t p1) {
    for_each_tile(rows, w, p0, p1, [&](std::int64_t r, std::int64_t p, __mmask16 lo, __mmask16 hi) {
      const int n = static_cast<int>(std::min<std::int64_t>(kMaxRows, rows - r));
      float* tile = c + (r0 + r) * ldc + p * PackedWeight::kPanel;
      kernel_for(n)(a + (r0 + r) * lda, lda, w.panel(p), w.k(), tile, ldc, lo, hi, false);
      if (has_epilogue) apply_epilogue(epilogue, tile, ldc, n, p * PackedWeight::kPanel, lo, hi);
    });
  });
}

namespace {

constexpr std::int64_t kDepthBlock = 192;          // rows of a and b per pass: a panel's slice (24 KiB) stays in L1
constexpr std::int64_t kRowChunk = 40 * kMaxRows;  // c's rows per packed chunk of a (360 KiB, in L2)

// Rows packed together per block (their source lines stay in L1 while the blocks' stores
// stream; row by row, the stores of many blocks a page apart evicted each other).
constexpr std::int64_t kPackGroup = 8;

// A 64-byte aligned float buffer of this thread's, kept between calls (grows, never shrinks).
float* thread_buffer(int which, std::int64_t floats) {
  struct Buffer {
    std::unique_ptr<float, PackedWeight::Free> data;
    std::int64_t size = 0;
  };
  thread_local std::array<Buffer, 2> buffers;
  Buffer& b = buffers[static_cast<std::size_t>(which)];
  if (b.size < floats) {
    b.size = 0;  // no buffer if the allocation fails
    b.data.reset(static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>((floats + 15) / 16 * 64))));
    TESSERA_CHECK(b.data != nullptr, "packed gemm: out of host memory for a buffer of {} floats", floats);
    b.size = floats;
  }
  return b.data.get();
}

// Columns [m0, m0 + rows) of a's rows [0, depth) (lda apart) in blocks of kMaxRows: block r holds,
// for each row kk, a[kk][m0 + r*kMaxRows + i] for i in [0, kMaxRows) (zeros past `rows`).
void pack_columns_of_a(const float* a, std::int64_t lda, std::int64_t depth, std::int64_t m0, std::int64_t rows,
                       float* out) {
  for (std::int64_t g = 0; g < depth; g += kPackGroup)
    for (std::int64_t r = 0; r < rows; r += kMaxRows) {
      const auto valid = static_cast<__mmask16>((1u << std::min(kMaxRows, rows - r)) - 1);
      for (std::int64_t kk = g; kk < std::min(depth, g + kPackGroup); ++kk)
        _mm512_mask_storeu_ps(out + r * depth + kk * kMaxRows, (1u << kMaxRows) - 1,
                              _mm512_maskz_loadu_ps(valid, a + kk * lda + m0 + r));
    }
}

// Columns [n0, n0 + cols) of b's rows [0, depth) (ldb apart) in panels, as PackedWeight lays them.
void pack_columns_of_b(const float* b, std::int64_t ldb, std::int64_t depth, std::int64_t n0, std::int64_t cols,
                       float* out) {
  constexpr std::int64_t kPanel = PackedWeight::kPanel;
  for (std::int64_t g = 0; g < depth; g += kPackGroup)
    for (std::int64_t p = 0; p * kPanel < cols; ++p) {
      const auto [lo, hi] = column_masks(std::min(kPanel, cols - p * kPanel));
      for (std::int64_t kk = g; kk < std::min(depth, g + kPackGroup); ++kk) {
        const float* src = b + kk * ldb + n0 + p * kPanel;
        float* o = out + p * kPanel * depth + kk * kPanel;
        _mm512_store_ps(o, _mm512_maskz_loadu_ps(lo, src));
        _mm512_store_ps(o + 16, _mm512_maskz_loadu_ps(hi, src + 16));
      }
    }
}

// c[m, n] (+)= a^T b on this thread alone, a block of kDepthBlock rows of a and b at a time: b's
// block is packed whole, a's in chunks of kRowChunk columns, and each panel of b meets every row
// block of the chunk while it is in L1.
void gemm_tn_serial(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const float* b,
                    std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  constexpr std::int64_t kPanel = PackedWeight::kPanel;
  const std::int64_t panels = (n + kPanel - 1) / kPanel;
  const std::int64_t depth_max = std::min(kDepthBlock, k);
  float* packed_b = thread_buffer(0, depth_max * panels * kPanel);
  float* packed_a = thread_buffer(1, depth_max * ((std::min(kRowChunk, m) + kMaxRows - 1) / kMaxRows * kMaxRows));
  for (std::int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
    const std::int64_t depth = std::min(kDepthBlock, k - k0);
    pack_columns_of_b(b + k0 * ldb, ldb, depth, 0, n, packed_b);
    for (std::int64_t c0 = 0; c0 < m; c0 += kRowChunk) {
      const std::int64_t rows = std::min(kRowChunk, m - c0);
      pack_columns_of_a(a + k0 * lda, lda, depth, c0, rows, packed_a);
      for (std::int64_t p = 0; p < panels; ++p) {
        const auto [lo, hi] = column_masks(std::min(kPanel, n - p * kPanel));
        for (std::int64_t r = 0; r < rows; r += kMaxRows)
          kernel_for<true>(static_cast<int>(std::min(kMaxRows, rows - r)))(
              packed_a + r * depth, kMaxRows, packed_b + p * kPanel * depth, depth, c + (c0 + r) * ldc + p * kPanel,
              ldc, lo, hi, accumulate || k0 > 0);
      }
    }
  }
}

}  // namespace

void packed_gemm_tn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const float* b,
                    std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  if (k == 0 && !accumulate)  // a sum of no products
    for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
  if (m == 0 || n == 0 || k == 0) return;
  const bool threads = !omp_in_parallel() && omp_get_max_threads() > 1 && m * n * k >= (1 << 20);
  // Threads split c along its longer side (columns by panels), each packing the other operand whole.
  const bool by_columns = n >= m && n > PackedWeight::kPanel;
  std::exception_ptr error;  // an exception may not leave an OpenMP region: rethrown after it
#pragma omp parallel if (threads)
  try {
    const std::int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    if (by_columns) {
      const std::int64_t panels = (n + PackedWeight::kPanel - 1) / PackedWeight::kPanel;
      const std::int64_t n0 = std::min(n, panels * t / count * PackedWeight::kPanel);
      const std::int64_t n1 = std::min(n, panels * (t + 1) / count * PackedWeight::kPanel);
      if (n1 > n0) gemm_tn_serial(m, n1 - n0, k, a, lda, b + n0, ldb, c + n0, ldc, accumulate);
    } else {
      const std::int64_t m0 = m * t / count, m1 = m * (t + 1) / count;
      if (m1 > m0) gemm_tn_serial(m1 - m0, n, k, a + m0, lda, b, ldb, c + m0 * ldc, ldc, accumulate);
    }
  } catch (...) {
#pragma omp critical(packed_gemm_tn_error)
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
}

#else
bool packed_gemm_available() { return false; }

void packed_gemm_nt(std::int64_t, const float*, std::int64_t, const PackedWeight&, float*, std::int64_t,
                    const GemmEpilogue&) {
  fail("packed_gemm_nt: this build has no AVX-512 (see packed_gemm_available)");
}

void packed_gemm_tn(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, const float*, std::int64_t,
                    float*, std::int64_t, bool) {
  fail("packed_gemm_tn: this build has no AVX-512 (see packed_gemm_available)");
}

#endif

namespace {

// Each entry keeps its weight alive, so that no other tensor takes its address while packed.
struct Entry {
  Tensor weight;
  std::unique_ptr<PackedWeight> packed;
  int scopes = 0;  // how many scopes hold it
};

struct Registry {
  std::shared_mutex mutex;
  std::map<const void*, Entry> entries;
  std::atomic<std::size_t> size{0};  // entries.size(), read without the lock by every matmul
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: scopes may end during static destruction
  return *r;
}

}  // namespace

PackedWeightScope::PackedWeightScope(const std::vector<Tensor>& weights) {
  if (!packed_gemm_available()) return;
  try {
    for (const Tensor& w : weights)
      if (w.dim() == 2 && w.dtype() == DType::f32 && w.device() == Device::cpu && w.numel() > 0) hold(w);
  } catch (...) {  // packing ran out of memory: what this scope holds goes back, as at its end
    release();
    throw;
  }
}

void PackedWeightScope::hold(const Tensor& w) {
  Registry& r = registry();
  const void* key = w.raw_data();
  {
    std::unique_lock lock(r.mutex);
    const auto it = r.entries.find(key);
    if (it != r.entries.end()) {
      ++it->second.scopes;
      keys_.push_back(key);
      return;
    }
  }
  auto packed = std::make_unique<PackedWeight>(w);  // outside the lock; may throw
  std::unique_lock lock(r.mutex);
  Entry& e = r.entries[key];
  if (e.packed == nullptr) {  // no other scope packed it meanwhile
    e.weight = w;
    e.packed = std::move(packed);
  }
  ++e.scopes;
  r.size = r.entries.size();
  keys_.push_back(key);
}

PackedWeightScope::~PackedWeightScope() { release(); }

void PackedWeightScope::release() {
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  for (const void* key : keys_) {
    auto it = r.entries.find(key);
    if (it != r.entries.end() && --it->second.scopes == 0) r.entries.erase(it);
  }
  keys_.clear();
  r.size = r.entries.size();
}

const PackedWeight* find_packed_weight(const float* w, std::int64_t n, std::int64_t k, std::int64_t ldw) {
  Registry& r = registry();
  if (r.size == 0) return nullptr;  // training: no lock taken
  std::shared_lock lock(r.mutex);
  const auto it = r.entries.find(w);
  if (it == r.entries.end()) return nullptr;
  const PackedWeight& p = *it->second.packed;
  return p.n() == n && p.k() == k && ldw == k ? &p : nullptr;
}

}  // namespace tessera::cpu
