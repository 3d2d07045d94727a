#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <type_traits>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/packed_gemm.h"

namespace tessera::cpu {
namespace {

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, float alpha, const float* a,
               blasint lda, const float* b, blasint ldb, float beta, float* c, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, double alpha, const double* a,
               blasint lda, const double* b, blasint ldb, double beta, double* c, blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Rows of x from which x @ op(B) packs B for the call (below, OpenBLAS: the packing would not pay).
constexpr std::int64_t kPackPerCallRows = 512;
// Multiply-adds from which dY^T x packs both operands (below, a small product: OpenBLAS's).
constexpr std::int64_t kPackPerCallFlops = std::int64_t{1} << 22;

struct MatmulDims {
  std::int64_t batch, m, n, k;
  bool b_shared;  // b is one 2-D matrix used for every batch
};

MatmulDims matmul_dims(const char* op, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  check_float(op, a);
  check_float(op, b);
  check_same_dtype(op, a, b);
  check_cpu(op, a);
  check_cpu(op, b);
  TESSERA_CHECK(a.dim() >= 2 && b.dim() >= 2, "{}: operands need at least 2 dimensions, got {} and {}", op,
                shape_str(a.shape()), shape_str(b.shape()));
  const bool b_shared = b.dim() == 2 && a.dim() > 2;
  if (!b_shared) {
    TESSERA_CHECK(a.dim() == b.dim() && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin()),
                  "{}: batch dimensions differ: {} vs {}", op, shape_str(a.shape()), shape_str(b.shape()));
  }
  const std::int64_t m = ta ? a.size(-1) : a.size(-2);
  const std::int64_t ka = ta ? a.size(-2) : a.size(-1);
  const std::int64_t kb = tb ? b.size(-1) : b.size(-2);
  const std::int64_t n = tb ? b.size(-2) : b.size(-1);
  TESSERA_CHECK(ka == kb, "{}: inner dimensions differ: {}{} @ {}{} ({} vs {})", op, shape_str(a.shape()),
                ta ? "^T" : "", shape_str(b.shape()), tb ? "^T" : "", ka, kb);
  std::int64_t batch = 1;  // the product of the leading dimensions (also when M or K is 0)
  for (std::int64_t i = 0; i + 2 < a.dim(); ++i) batch *= a.size(i);
  return {batch, m, n, ka, b_shared};
}

// dY^T x (a [k, m] transposed, b [k, n], 2-D: the weight gradients, the loss's dW) on the packed
// kernel: 1.05 to 1.15 times OpenBLAS's rate, whose packing costs the same share at any k.
// beta 1 adds to out.
bool packed_matmul_tn(Tensor& out, const Tensor& a, const Tensor& b, const MatmulDims& d, bool trans_b, double beta) {
  if (trans_b || a.dim() != 2 || b.dim() != 2 || d.m * d.n * d.k < kPackPerCallFlops || (beta != 0.0 && beta != 1.0))
    return false;
  packed_gemm_tn(d.m, d.n, d.k, a.data<float>(), a.size(1), b.data<float>(), b.size(1), out.data<float>(), d.n,
                 beta == 1.0);
  return true;
}

// out = a @ op(b) on the packed kernel (packed_gemm.h), when it takes the case; false: BLAS's.
// The epilogue (x W^T only) is applied when it returns true.
bool packed_matmul(Tensor& out, const Tensor& a, const Tensor& b, const MatmulDims& d, bool trans_a, bool trans_b,
                   double alpha, double beta, const GemmEpilogue& epilogue = {}) {
  if (a.dtype() != DType::f32 || alpha != 1.0 || bf16_matmul() || !packed_gemm_available()) return false;
  const bool has_epilogue = epilogue.bias != nullptr || epilogue.relu;
  if (trans_a) return !has_epilogue && packed_matmul_tn(out, a, b, d, trans_b, beta);
  if (beta != 0.0 || (b.dim() != 2 && d.batch != 1)) return false;
  const std::int64_t rows = d.batch * d.m;
  if (const PackedWeight* w = trans_b ? find_packed_weight(b.data<float>(), d.n, d.k, b.size(-1)) : nullptr) {
    packed_gemm_nt(rows, a.data<float>(), a.size(-1), *w, out.data<float>(), d.n, epilogue);
    return true;
  }
  // Training's x W^T and dY W: packing b costs 1/M of the product, and OpenBLAS packs both
  // operands and zeroes C first (about a fifth of a step's GEMM time).
  if (rows < kPackPerCallRows) return false;
  const PackedWeight packed(b.data<float>(), d.n, d.k, b.size(-1), trans_b);
  packed_gemm_nt(rows, a.data<float>(), a.size(-1), packed, out.data<float>(), d.n, epilogue);
  return true;
}

}  // namespace

template <typename T>
void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                          const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                          std::int64_t stride_b, T beta, T* c, std::int64_t ldc, std::int64_t stride_c,
                          std::int64_t batch) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  // Large GEMMs: one BLAS call per batch, BLAS threads each call. Many small ones (attention
  // heads): the batches run in parallel, each on one thread (BLAS stays serial inside an OpenMP
  // region). A shared output (stride_c == 0) accumulates, so its batches stay in order.
  const bool small = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < 262144.0;
  if (small && batch > 1 && stride_c != 0) {
    ScopedSerialBlas serial;
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < batch; ++i) {
      blas_gemm(ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
                a + i * stride_a, static_cast<blasint>(lda), b + i * stride_b, static_cast<blasint>(ldb), beta,
                c + i * stride_c, static_cast<blasint>(ldc));
    }
    return;
  }
  for (std::int64_t i = 0; i < batch; ++i) {
    blas_gemm(ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
              a + i * stride_a, static_cast<blasint>(lda), b + i * stride_b, static_cast<blasint>(ldb), beta,
              c + i * stride_c, static_cast<blasint>(ldc));
  }
}

template void gemm_strided_batched<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                          std::int64_t, std::int64_t, const float*, std::int64_t, std::int64_t, float,
                                          float*, std::int64_t, std::int64_t, std::int64_t);
template void gemm_strided_batched<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                                           std::int64_t, std::int64_t, const double*, std::int64_t, std::int64_t,
                                           double, double*, std::int64_t, std::int64_t, std::int64_t);

namespace {
// The GEMM behind the tensor matmuls: bfloat16 operands for float32 when set_bf16_matmul is on.
template <typename T>
void tensor_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                 std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb, std::int64_t stride_b, T beta,
                 T* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_matmul()) {
      gemm_bf16_strided_batched(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                                stride_c, batch);
      return;
    }
  }
  gemm_strided_batched<T>(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                          batch);
}
}  // namespace

void matmul_into(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha, double beta) {
  const MatmulDims d = matmul_dims("matmul", a, b, trans_a, trans_b);
  Shape want = a.shape();
  want[want.size() - 2] = d.m;
  want[want.size() - 1] = d.n;
  if (a.dim() == 2 && b.dim() == 2) want = {d.m, d.n};
  TESSERA_CHECK(out.shape() == want, "matmul: output has shape {}, expected {}", shape_str(out.shape()),
                shape_str(want));
  check_same_dtype("matmul", out, a);
  if (out.numel() == 0) return;
  if (d.k == 0) {  // a sum of no products; BLAS would refuse the leading dimension 0
    if (beta == 0.0) {
      out.fill(0.0);
    } else {
      dispatch_float("matmul", out.dtype(), [&]<typename T>() {
        T* o = out.data<T>();
        for (std::int64_t i = 0; i < out.numel(); ++i) o[i] *= static_cast<T>(beta);
      });
    }
    return;
  }
  if (packed_matmul(out, a, b, d, trans_a, trans_b, alpha, beta)) return;
  dispatch_float("matmul", a.dtype(), [&]<typename T>() {
    const std::int64_t lda = a.size(-1), ldb = b.size(-1);
    if (d.b_shared && !trans_a) {
      // [batch*M, K] @ [K, N]: one large GEMM instead of `batch` small ones.
      tensor_gemm<T>(false, trans_b, d.batch * d.m, d.n, d.k, static_cast<T>(alpha), a.data<T>(), lda, 0, b.data<T>(),
                     ldb, 0, static_cast<T>(beta), out.data<T>(), d.n, 0, 1);
      return;
    }
    tensor_gemm<T>(trans_a, trans_b, d.m, d.n, d.k, static_cast<T>(alpha), a.data<T>(), lda, a.size(-1) * a.size(-2),
                   b.data<T>(), ldb, d.b_shared ? 0 : b.size(-1) * b.size(-2), static_cast<T>(beta), out.data<T>(), d.n,
                   d.m * d.n, d.batch);
  });
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const MatmulDims d = matmul_dims("matmul", a, b, trans_a, trans_b);
  Shape shape = a.shape();
  shape[shape.size() - 2] = d.m;
  shape[shape.size() - 1] = d.n;
  Tensor out = Tensor::empty(shape, a.dtype());
  matmul_into(out, a, b, trans_a, trans_b, 1.0, 0.0);
  return out;
}

Tensor linear_bias_relu(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  TESSERA_CHECK(x.dim() == 2 && w.dim() == 2, "linear: expects 2-D x and w, got {} and {}", x.describe(), w.describe());
  const MatmulDims d = matmul_dims("linear", x, w, false, true);
  if (bias.defined()) {
    check_cpu("linear", bias);
    check_same_dtype("linear", x, bias);
    TESSERA_CHECK(bias.shape() == Shape{d.n}, "linear: bias {} for rows of {} (expected [{}])", shape_str(bias.shape()),
                  d.n, d.n);
  }
  Tensor out = Tensor::empty({d.m, d.n}, x.dtype());
  if (out.numel() == 0) return out;
  const GemmEpilogue epilogue{bias.defined() && x.dtype() == DType::f32 ? bias.data<float>() : nullptr, relu};
  if (d.k > 0 && packed_matmul(out, x, w, d, false, true, 1.0, 0.0, epilogue)) return out;
  matmul_into(out, x, w, false, true, 1.0, 0.0);
  if (bias.defined() || relu) bias_relu_inplace(out, bias, relu);
  return out;
}

Tensor matmul_batch_sum(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  TESSERA_CHECK(a.dim() == 3 && b.dim() == 3, "matmul_batch_sum: expects 3-D a and b, got {} and {}", a.describe(),
                b.describe());
  const MatmulDims d = matmul_dims("matmul_batch_sum", a, b, trans_a, trans_b);
  Tensor out = Tensor::zeros({d.m, d.n}, a.dtype());
  if (out.numel() == 0 || d.k == 0 || d.batch == 0) return out;  // a sum of no products
  dispatch_float("matmul_batch_sum", a.dtype(), [&]<typename T>() {
    tensor_gemm<T>(trans_a, trans_b, d.m, d.n, d.k, T(1), a.data<T>(), a.size(-1), a.size(-1) * a.size(-2), b.data<T>(),
                   b.size(-1), b.size(-1) * b.size(-2), T(1), out.data<T>(), d.n, 0, d.batch);
  });
  return out;
}

// openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP. The OpenMP build already runs
// single-threaded inside a parallel region, and its openblas_set_num_threads would also change
// OpenMP's own thread count, so only the pthreads build needs limiting.
ScopedSerialBlas::ScopedSerialBlas() : saved_threads_(openblas_get_parallel() == 1 ? openblas_get_num_threads() : 0) {
  if (saved_threads_ > 0) openblas_set_num_threads(1);
}
ScopedSerialBlas::~ScopedSerialBlas() {
  if (saved_threads_ > 0) openblas_set_num_threads(saved_threads_);
}

}  // namespace tessera::cpu
