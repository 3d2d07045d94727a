// What the CUDA emulator's runtime files (kernel_launch.cpp, memory.cpp, devices.cpp, streams.cpp)
// share with each other; not part of the emulated API (see include/cuda_runtime.h for that).
#pragma once

#include <cstddef>

#include "cuda_runtime.h"

namespace tessera::cuda_emulator {

constexpr std::size_t kDeviceBytes = std::size_t{16} << 30;  // what the emulated GPU reports

constexpr int kSharedOptin = 232448;  // H100: 227 KB of shared memory per block, opted in
constexpr int kSharedDefault = 48 * 1024;

// memory.cpp
std::size_t page_size();
std::size_t round_up(std::size_t n, std::size_t to);
void checked_mprotect(void* p, std::size_t bytes, int prot);

// devices.cpp: the last error, and the largest pitch of a 2D copy
void set_error(cudaError_t err);
cudaError_t sync_result();
int max_pitch();

}  // namespace tessera::cuda_emulator
