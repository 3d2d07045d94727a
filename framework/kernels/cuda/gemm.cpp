#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/device.h"
#include "kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};

cublasHandle_t handle() {
  thread_local cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    const cublasStatus_t st = cublasCreate(&created);
    TESSERA_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLAS: cublasCreate failed: {}", cublasGetStatusString(st));
    return created;
  }();
  return h;
}

struct GemmDims {
  std::int64_t m, n, k, batch, stride_a, stride_b;
};

GemmDims gemm_dims(const char* op, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  TESSERA_CHECK(a.dim() >= 2 && b.dim() >= 2, "{}: needs matrices, got {} and {}", op, a.describe(), b.describe());
  const std::int64_t m = trans_a ? a.size(-1) : a.size(-2), ka = trans_a ? a.size(-2) : a.size(-1);
  const std::int64_t kb = trans_b ? b.size(-1) : b.size(-2), n = trans_b ? b.size(-2) : b.size(-1);
  TESSERA_CHECK(ka == kb, "{}: inner dimensions differ: {}{} and {}{}", op, a.describe(),
                trans_a ? " (transposed)" : "", b.describe(), trans_b ? " (transposed)" : "");
  std::int64_t batch = 1;  // the product of the leading dimensions (also when M or K is 0)
  for (std::int64_t i = 0; i + 2 < a.dim(); ++i) batch *= a.size(i);
  const bool b_shared = b.dim() == 2;
  TESSERA_CHECK(
      b_shared || (b.dim() == a.dim() && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin())),
      "{}: batch dimensions of {} and {} differ", op, a.describe(), b.describe());
  // One matrix b for every batch of an untransposed a: the batches are consecutive rows of one
  // [batch * m, k] matrix, so one large GEMM replaces `batch` small ones (a linear layer over
  // [B, L, d] is one GEMM of B * L rows, whatever L is).
  if (b_shared && !trans_a) return {m * batch, n, ka, 1, 0, 0};
  return {m, n, ka, batch, a.size(-1) * a.size(-2), b_shared ? 0 : b.size(-1) * b.size(-2)};
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

void matmul_into(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha, double beta) {
  const char* op = "cuda::matmul";
  const Elem elem = elem_of(op, a);
  check_on_gpu(op, b);
  check_on_gpu(op, out);
  TESSERA_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), "{}: dtypes differ: {}, {}, out {}", op,
                a.describe(), b.describe(), out.describe());
  const GemmDims d = gemm_dims(op, a, b, trans_a, trans_b);
  TESSERA_CHECK(out.numel() == d.batch * d.m * d.n && out.size(-1) == d.n, "{}: out {} is not [..., {}, {}]", op,
                out.describe(), d.m, d.n);
  if (d.batch * d.m * d.n == 0) return;
  if (d.k == 0) {  // a sum of no products: beta * out, as the CPU twin (cuBLAS has been seen to write garbage here)
    check_launch(op, beta == 0.0 ? cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), nullptr)
                                 : launch_unary(Unary::affine, out.raw_data(), out.raw_data(), out.numel(),
                                                static_cast<float>(beta), 0.0f, elem, nullptr));
    return;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first.
  const cudaDataType type = elem == Elem::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      elem == Elem::f32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const auto i32 = [&](std::int64_t v) {
    TESSERA_CHECK(v <= 2147483647, "{}: dimension {} is too large for cuBLAS", op, v);
    return static_cast<int>(v);
  };
  const auto ld = [&](std::int64_t v) { return i32(std::max<std::int64_t>(1, v)); };  // K = 0: cuBLAS wants >= 1
  const cublasStatus_t st = cublasGemmStridedBatchedEx(
      handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, i32(d.n), i32(d.m), i32(d.k),
      &alpha_f, b.raw_data(), type, ld(trans_b ? d.k : d.n), d.stride_b, a.raw_data(), type, ld(trans_a ? d.m : d.k),
      d.stride_a, &beta_f, out.raw_data(), type, i32(d.n), d.m * d.n, i32(d.batch), compute, CUBLAS_GEMM_DEFAULT);
  TESSERA_CHECK(st == CUBLAS_STATUS_SUCCESS, "{}: cuBLAS failed on {} x {}: {}", op, a.describe(), b.describe(),
                cublasGetStatusString(st));
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const GemmDims d = gemm_dims("cuda::matmul", a, b, trans_a, trans_b);
  Shape shape(a.shape().begin(), a.shape().end() - 2);
  shape.push_back(trans_a ? a.size(-1) : a.size(-2));  // d.m may count every batch's rows
  shape.push_back(d.n);
  Tensor out = Tensor::empty(shape, a.dtype(), Device::cuda);
  matmul_into(out, a, b, trans_a, trans_b, 1.0, 0.0);
  return out;
}

}  // namespace tessera::cuda
