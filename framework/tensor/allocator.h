// Raw memory for tensors: 64-byte-aligned host memory; device memory when built with CUDA.
#pragma once

#include <cstddef>

#include "tensor/dtype.h"

namespace tessera {

inline constexpr std::size_t kTensorAlignment = 64;

void* allocate(std::size_t bytes, Device device);
void deallocate(void* ptr, Device device) noexcept;
// Copies bytes between any two devices (host<->device through the CUDA runtime).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
// True when this build has CUDA and a GPU answers. Any CUDA error counts as "no GPU".
bool cuda_available();

}  // namespace tessera
