#include "tensor/allocator.h"

#include <cstdlib>
#include <cstring>

#include "common/error.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera {

void* allocate(std::size_t bytes, Device device) {
  if (bytes == 0) bytes = kTensorAlignment;  // a valid, unique pointer for empty tensors
  if (device == Device::cpu) {
    // aligned_alloc wants a size that is a multiple of the alignment.
    const std::size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    void* p = std::aligned_alloc(kTensorAlignment, rounded);
    TESSERA_CHECK(p != nullptr, "allocate: out of host memory for {} bytes", bytes);
    return p;
  }
#ifdef TESSERA_WITH_CUDA
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  TESSERA_CHECK(err == cudaSuccess, "allocate: cudaMalloc of {} bytes failed: {}", bytes, cudaGetErrorString(err));
  return p;
#else
  fail("allocate: this build of Tessera has no CUDA support (configure with nvcc present)");
#endif
}

void deallocate(void* ptr, Device device) noexcept {
  if (ptr == nullptr) return;
  if (device == Device::cpu) {
    std::free(ptr);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  cudaFree(ptr);
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  const cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  TESSERA_CHECK(err == cudaSuccess, "copy_bytes: cudaMemcpy of {} bytes failed: {}", bytes, cudaGetErrorString(err));
#else
  fail("copy_bytes: this build of Tessera has no CUDA support");
#endif
}

bool cuda_available() {
#ifdef TESSERA_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "insufficient driver" error
    return false;
  }
  return count > 0;
#else
  return false;
#endif
}

}  // namespace tessera
