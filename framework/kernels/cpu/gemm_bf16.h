// bfloat16 GEMMs for float32 tensors on the CPU, through oneDNN: the operands are rounded to
// bfloat16 (nearest even), multiplied on the CPU's bfloat16 units (AMX tiles or AVX512-BF16), and
// the products accumulate and land in float32. On for train.precision bf16 on the CPU.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::cpu {

// Whether matmul, matmul_into and matmul_batch_sum on float32 tensors take the bfloat16 path
// (off by default; attention's own tile GEMMs stay float32 either way).
void set_bf16_matmul(bool on);
bool bf16_matmul();

// The oneDNN kernel a bfloat16 GEMM runs on this CPU, e.g. "brg:avx512_core_amx_bf16", for logs.
std::string bf16_matmul_kernel();
// True when that kernel uses bfloat16 instructions (AMX or AVX512-BF16) rather than oneDNN's
// reference code or an emulation on plain AVX-512, which would be slower than float32.
bool bf16_matmul_native();

// gemm_strided_batched<float>'s contract (row-major, op(X) = X or X^T, stride 0 shares a matrix;
// stride_c 0 accumulates the batches one after another) with bfloat16 operands.
void gemm_bf16_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                               const float* a, std::int64_t lda, std::int64_t stride_a, const float* b,
                               std::int64_t ldb, std::int64_t stride_b, float beta, float* c, std::int64_t ldc,
                               std::int64_t stride_c, std::int64_t batch);

}  // namespace tessera::cpu
