// Float32 GEMMs on our AVX-512 kernel: y = x W^T against a weight packed once (decoding: OpenBLAS
// repacked W on every call, in beam search as long as a third of the multiplication), the same
// against an operand packed per call (training's x W^T and dY W), and dY^T x (weight gradients).
// W is laid out in panels of 32 of its rows, and x is read where it is.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

namespace tessera::cpu {

// W [N, K] float32 in panels of kPanel rows: panel p holds, for each k, W[p*kPanel + j][k] for j in
// [0, kPanel), contiguous (rows past N are zeros).
class PackedWeight {
 public:
  static constexpr std::int64_t kPanel = 32;
  explicit PackedWeight(const Tensor& w);
  // The product's right operand B^T [n, k] packed from row-major memory: b_is_w, B^T itself (rows
  // ldb apart, W of x W^T); otherwise B [k, n] (rows ldb apart, the B of x B).
  PackedWeight(const float* b, std::int64_t n, std::int64_t k, std::int64_t ldb, bool b_is_w);

  std::int64_t n() const { return n_; }
  std::int64_t k() const { return k_; }
  const float* panel(std::int64_t p) const { return data_.get() + p * kPanel * k_; }
  std::int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }

  struct Free {  // of aligned_alloc's memory
    void operator()(float* p) const;
  };

 private:
  void pack(const float* src, std::int64_t ld, bool rows_are_columns);
  std::int64_t n_, k_;
  std::unique_ptr<float, Free> data_;
};

// Whether this build has the packed kernel (it needs AVX-512); without it nothing is packed and
// every GEMM stays on BLAS.
bool packed_gemm_available();

// What packed_gemm_nt does to each element of c after its sum: + bias[column], then ReLU (a NaN
// stays NaN, as relu's). Applied tile by tile while the tile is in L1, it saves a pass over c.
struct GemmEpilogue {
  const float* bias = nullptr;  // [n], or none
  bool relu = false;
};

// c[m, n] = a[m, k] W^T (row-major, leading dimensions lda and ldc), each element a sum over k in
// order, fused multiply-adds from 0, then the epilogue. Threads over blocks of rows and columns
// unless called inside a parallel region.
void packed_gemm_nt(std::int64_t m, const float* a, std::int64_t lda, const PackedWeight& w, float* c, std::int64_t ldc,
                    const GemmEpilogue& epilogue = {});

// c[m, n] = a^T b, or c += a^T b when accumulating: a [k, m] and b [k, n] row-major (rows lda and
// ldb apart), c rows ldc apart; the weight gradient dY^T x of training. Each element is one chain
// of fused multiply-adds over k in order (from 0, or from c). Packs both
// operands a block of rows at a time. Threads split c along its longer side, each packing what it
// reads itself, unless called inside a parallel region.
void packed_gemm_tn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const float* b,
                    std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate = false);

// While one lives, float32 CPU matmuls of the form x @ W^T against one of `weights` (2-D, the
// same data) run on packed copies of them, in every thread of the process. The weights must not
// change meanwhile; scopes nest and each removes only its own weights. Without
// packed_gemm_available() it packs nothing.
class PackedWeightScope {
 public:
  explicit PackedWeightScope(const std::vector<Tensor>& weights);
  ~PackedWeightScope();
  PackedWeightScope(const PackedWeightScope&) = delete;
  PackedWeightScope& operator=(const PackedWeightScope&) = delete;

 private:
  void hold(const Tensor& w);  // packs w unless a scope holds it already
  void release();
  std::vector<const void*> keys_;
};

// The packed copy of the weight whose data starts at `w` with shape [n, k] and rows k apart, if a
// scope holds one.
const PackedWeight* find_packed_weight(const float* w, std::int64_t n, std::int64_t k, std::int64_t ldw);

}  // namespace tessera::cpu
