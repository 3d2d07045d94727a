// A device array for the emulator's tests: cudaMalloc'd, read and written through cudaMemcpy.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace tessera::cuda_emulator {

template <typename T>
struct DeviceArray {
  explicit DeviceArray(std::size_t n) : size(n) { EXPECT_EQ(cudaMalloc(&data, n * sizeof(T)), cudaSuccess); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data); }
  std::vector<T> read() const {
    std::vector<T> out(size);
    EXPECT_EQ(cudaMemcpy(out.data(), data, size * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  void write(const std::vector<T>& v) {
    EXPECT_EQ(cudaMemcpy(data, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  T* data = nullptr;
  std::size_t size;
};

}  // namespace tessera::cuda_emulator
