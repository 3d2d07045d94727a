// Tessera's CUDA emulator: cublasGemmStridedBatchedEx on the CPU (see include/cublas_v2.h).
#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

float tf32(float x) {  // round to nearest even at 10 mantissa bits, as the tensor cores read float32
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Elements [0, count) of a float32 or bfloat16 array (strided by `stride` elements per batch
// entry) as float32.
std::vector<float> widen(const void* p, cudaDataType type, std::int64_t count, bool round_tf32) {
  std::vector<float> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = type == CUDA_R_16BF ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                                        : static_cast<const float*>(p)[i];
    out[static_cast<std::size_t>(i)] = round_tf32 ? tf32(v) : v;
  }
  return out;
}

// The elements a column-major rows x cols matrix of leading dimension ld spans.
std::int64_t span(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "unknown cuBLAS status";
}

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b], column-major, C m x n, op(A) m x k.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  using tessera::cuda_emulator::is_device_memory;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) ||
      ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (Atype != Btype || Atype != Ctype || (Atype != CUDA_R_32F && Atype != CUDA_R_16BF) ||
      (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 && Atype != CUDA_R_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  const std::size_t elem = Atype == CUDA_R_16BF ? 2 : 4;
  const auto bytes = [&](std::int64_t count) { return static_cast<std::size_t>(count > 0 ? count : 1) * elem; };
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const bool round = computeType == CUBLAS_COMPUTE_32F_FAST_TF32;
  tessera::cuda_emulator::wait_before_work(handle->stream);
  for (int batch = 0; batch < batchCount; ++batch) {
    const char* a = static_cast<const char*>(A) + static_cast<std::size_t>(strideA * batch) * elem;
    const char* b = static_cast<const char*>(B) + static_cast<std::size_t>(strideB * batch) * elem;
    char* c = static_cast<char*>(C) + static_cast<std::size_t>(strideC * batch) * elem;
    const std::int64_t a_span = span(a_rows, a_cols, lda), b_span = span(b_rows, b_cols, ldb), c_span = span(m, n, ldc);
    if ((k > 0 && (!is_device_memory(a, bytes(a_span)) || !is_device_memory(b, bytes(b_span)))) ||
        !is_device_memory(c, bytes(c_span)))
      return CUBLAS_STATUS_EXECUTION_FAILED;  // cuBLAS would read or write outside device memory
    tessera::cuda_emulator::DeviceAccess access;
    const std::vector<float> fa = widen(a, Atype, a_span, round), fb = widen(b, Btype, b_span, round);
    std::vector<float> fc = widen(c, Ctype, c_span, false);
    if (be == 0.0f) std::fill(fc.begin(), fc.end(), 0.0f);  // beta 0: C is not read (NaN stays out)
    if (k > 0)
      cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, al, fa.data(),
                  lda, fb.data(), ldb, be, fc.data(), ldc);
    else
      for (float& x : fc) x *= be;
    for (std::int64_t col = 0; col < n; ++col)
      for (std::int64_t row = 0; row < m; ++row) {
        const float v = fc[static_cast<std::size_t>(col * ldc + row)];
        if (Ctype == CUDA_R_16BF)
          reinterpret_cast<__nv_bfloat16*>(c)[col * ldc + row] = __float2bfloat16(v);
        else
          reinterpret_cast<float*>(c)[col * ldc + row] = v;
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
