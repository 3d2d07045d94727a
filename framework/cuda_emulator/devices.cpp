// The CUDA emulator's devices and errors: the device queries and the last error (see
// include/cuda_runtime.h for what is emulated).
#include <cstdlib>
#include <cstring>

#include "runtime_internal.h"

namespace tessera::cuda_emulator {
namespace {

// ---- errors ----
thread_local cudaError_t t_last_error = cudaSuccess;

// ---- devices ----
thread_local int t_device = 0;
int device_count() {
  const char* v = std::getenv("TESSERA_CUDA_EMULATOR_DEVICES");
  const int n = v != nullptr ? std::atoi(v) : 8;
  return n < 0 ? 0 : n;
}

}  // namespace

// The first error stays, but a failure replaces a "not ready" kept from cudaEventQuery.
void set_error(cudaError_t err) {
  if (t_last_error == cudaSuccess || (t_last_error == cudaErrorNotReady && err != cudaErrorNotReady))
    t_last_error = err;
}
// What a synchronization returns: a failure so far, not a stale "not ready".
cudaError_t sync_result() { return t_last_error == cudaErrorNotReady ? cudaSuccess : t_last_error; }

// The largest pitch of a 2D copy: A100, H100 and H200 report 2 GiB - 1 bytes. A test may set a
// smaller one (TESSERA_CUDA_EMULATOR_MAX_PITCH) to reach the limit without gigabytes of memory.
int max_pitch() {
  const char* v = std::getenv("TESSERA_CUDA_EMULATOR_MAX_PITCH");
  const int n = v != nullptr ? std::atoi(v) : 0;
  return n > 0 ? n : 2147483647;
}

}  // namespace tessera::cuda_emulator

using namespace tessera::cuda_emulator;

// ---- host API ----
cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "Tessera CUDA emulator");
  // A machine's devices differ by index; processes on one machine see the same devices.
  std::memcpy(prop->uuid.bytes, "emulated-gpu", 12);
  std::memcpy(prop->uuid.bytes + 12, &device, sizeof device);
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = kSharedDefault;
  prop->sharedMemPerBlockOptin = kSharedOptin;
  prop->memPitch = static_cast<std::size_t>(max_pitch());
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMaxPitch:
      *value = max_pitch();
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = kSharedOptin;
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
cudaError_t cudaGetLastError() {
  const cudaError_t err = t_last_error;
  t_last_error = cudaSuccess;
  return err;
}
cudaError_t cudaPeekAtLastError() { return t_last_error; }
const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidPitchValue:
      return "invalid pitch argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
  }
  return "unknown error";
}
