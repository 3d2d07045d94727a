// Launchers of the kernels that exercise kernels/cuda/mma.cuh on the emulator (ptx_cases.cu);
// pointers are device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda_emulator::cases {

// How mma_product builds its fragments: as the PTX ISA documents, or with one deliberate slip
// (A's registers 1 and 2 swapped: rows groupID + 8 and columns + 8 confused; or B's k rows
// taken from threadID_in_group without the factor 2).
enum class FragmentIndexing { documented, swapped_a_registers, b_rows_off_by_factor };
// d (16 x 8 f32) = a (16 x 16 bf16, row-major) * b (16 x 8 bf16, row-major) + c (16 x 8 f32),
// one warp, fragments loaded from global memory lane by lane. exited_lanes: lanes 16..31 return
// before the mma.
cudaError_t mma_product(const void* a, const void* b, const float* c, float* d, FragmentIndexing indexing,
                        bool exited_lanes = false);
// The same for mma.sync.m16n8k8 .tf32: d (16 x 8) = a (16 x 8 f32, row-major) * b (8 x 8 f32,
// row-major) + c, each a and b element rounded by cvt.rna.tf32.f32 unless raw (then the tensor
// cores truncate it). The slips: A's registers 1 and 2 swapped (rows + 8 and columns + 4
// confused), or B's rows threadID_in_group + 4 taken as + 1.
enum class Tf32Indexing { documented, swapped_a_registers, b_rows_off_by_three };
cudaError_t mma_tf32_product(const float* a, const float* b, const float* c, float* d, Tf32Indexing indexing,
                             bool raw = false);
// out[i] = the bits of cvt.rna.tf32.f32(in[i]) for 32 values (one warp).
cudaError_t round_to_tf32(const float* in, std::uint32_t* out);
// ldmatrix.x4 (.trans when trans) of 32 rows of 8 b16 each, row r of matrix r / 8 (the rows
// copied into shared memory with a row stride of `stride` elements, a multiple of 8 keeps
// them 16-byte aligned): out[lane * 4 + m] = register m of lane.
cudaError_t ldmatrix_rows(const std::uint16_t* rows, std::uint32_t* out, bool trans, int stride);
// Thread t copies 16 bytes (src + 4 t floats, or zeros when t is odd and zero_fill) into shared
// memory with cp.async, then writes them to out + 4 t: after cp.async.wait_group 0 when
// wait, before it otherwise. 32 threads.
cudaError_t async_copy(const float* src, float* out, bool wait, bool zero_fill);

}  // namespace tessera::cuda_emulator::cases
