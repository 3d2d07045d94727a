// Launchers of the emulator's test kernels (emulator_cases.cu); pointers are device pointers.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda_emulator::cases {

cudaError_t neighbours(int* out, int blocks, int threads, bool with_barrier);
cudaError_t copy(const float* in, float* out, int threads, cudaStream_t stream = nullptr);
cudaError_t early_exit_shuffle(float* out);
cudaError_t deadlock(float* out);
cudaError_t warp_sum(float* out, int threads);
// How wmma_product breaks the rule that wmma calls are the whole warp's, with the same arguments:
// lanes 16..31 load a from another pointer, skip the load of b, or exit before the store.
enum class WmmaMisuse { none, other_pointer, skipped_call, exited_lanes };
// c (16 x 16 float32) = a * b (16 x 16 bfloat16 each, row-major), the tiles placed `offset`
// bfloat16 elements into shared memory.
cudaError_t wmma_product(const void* a, const void* b, float* c, int offset, WmmaMisuse misuse = WmmaMisuse::none);
cudaError_t unwritten_shared(float* out);
cudaError_t unwritten_static_shared(float* out);               // two blocks of 32; out[0..32) from block 1
cudaError_t read_at(const float* in, float* out, long index);  // out[0] = in[index]
cudaError_t chain(int* out, int blocks);                       // out[i] = out[i - 1] + 1, across blocks (a race)
// A kernel using 100 KB of dynamic shared memory, with or without opting in to it.
cudaError_t big_shared(float* out, bool opt_in);

}  // namespace tessera::cuda_emulator::cases
