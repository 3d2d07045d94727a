// Raw memory for tensors: 64-byte-aligned host memory; device memory when built with CUDA.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "tensor/dtype.h"

namespace tessera {

inline constexpr std::size_t kTensorAlignment = 64;

// Host memory comes from a caching allocator: a freed block is kept, by size, for the next
// allocation of the same size (a training step allocates the same shapes every step), so the
// steady state makes no system calls and touches no fresh pages. The cache holds at most
// TESSERA_HOST_CACHE_MB megabytes (default 512); release_cached_host_memory() empties it. More
// is not better: blocks of sizes that do not come back sit in the cache, and the memory malloc
// would have reused for other sizes is taken fresh from the system instead (multi30k config,
// 5 minutes on one thread: 4096 MB gave 68 steps, 23.8 s system time, 5.1 GB resident; 512 MB
// gave 72 steps, 15.9 s, 2.2 GB; the peak held by live tensors was 1.35 GiB in both).
void* allocate(std::size_t bytes, Device device);
// The block an allocation of `bytes` takes (and counts in MemoryStats): its size class.
std::size_t allocation_block_size(std::size_t bytes);
void deallocate(void* ptr, Device device) noexcept;
// Copies bytes between any two devices (host<->device through the CUDA runtime).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
// An allocation the system (or the cap below) refused: training names the rank and the step.
// TESSERA_HOST_MEMORY_LIMIT_MB / TESSERA_DEVICE_MEMORY_LIMIT_MB cap what the allocator reserves
// (in use + cached) from the system, as a smaller machine would (tests).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};
struct MemoryStats {
  std::size_t in_use = 0;              // bytes held by live tensors
  std::size_t peak_in_use = 0;         // high-water mark of in_use
  std::size_t cached = 0;              // bytes kept for reuse
  std::size_t system_allocations = 0;  // blocks obtained from the system (aligned_alloc / cudaMalloc)
  std::size_t reserved() const { return in_use + cached; }
};
MemoryStats host_memory_stats();
void release_cached_host_memory();
void reset_peak_host_memory();  // peak_in_use = in_use (tests that measure one step)
// GPU memory comes from the same kind of cache (no cudaMalloc or cudaFree once a training step's
// shapes have been seen; TESSERA_DEVICE_CACHE_MB bounds what it keeps). All zero without CUDA.
MemoryStats device_memory_stats();
void release_cached_device_memory();
void reset_peak_device_memory();
// The current GPU's free memory as the CUDA runtime reports it (cudaMemGetInfo); 0 without CUDA.
std::size_t device_free_memory();

// Sets every byte to 0 (asynchronously on the GPU's default stream).
void zero_bytes(void* dst, Device device, std::size_t bytes);

// True when this build has CUDA and a GPU answers. Any CUDA error counts as "no GPU".
bool cuda_available();
// Why cuda_available() is false (the CUDA runtime's error, e.g. a driver too old for the runtime);
// empty when it is true.
std::string cuda_unavailable_reason();
// Makes GPU local_rank % (GPUs this process sees) current for this process (one GPU per rank).
// Throws naming the cause without CUDA or a GPU.
struct CudaDevice {
  std::string description;             // e.g. "cuda:1 (NVIDIA H200, 139.8 GiB)"
  std::array<std::int32_t, 4> uuid{};  // the physical GPU's UUID: ranks compare it to find sharing
};
CudaDevice select_cuda_device(int local_rank);
// Waits until the GPU has finished the compute work queued so far (the default stream; not the
// communicators' streams): timings. A no-op without a GPU.
void synchronize_device();

}  // namespace tessera
