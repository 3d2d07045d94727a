// The CUDA emulator's device memory: the arena, cudaMalloc and cudaFree, and the copies and sets
// checked against its live allocations (see include/cuda_runtime.h for what is emulated and checked).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "runtime_internal.h"

namespace tessera::cuda_emulator {
namespace {

// ---- device memory: one reserved range, handed out upwards, never reused ----
// Outside the emulator's own work it has no access, so host code reading a device pointer faults.
// Each allocation ends flush against its last page (256-byte aligned, as cudaMalloc's) with a
// guard page after it, so a read past its end does not land in a neighbour (see protect()). A
// freed allocation's pages go back to the system and its range is never reused. Copies and
// kernel arguments are checked against the live allocations.
constexpr std::size_t kArenaBytes = std::size_t{1} << 38;  // 256 GiB of address space, not memory

struct Allocation {
  std::size_t bytes;       // as asked for
  char* pages;             // its pages (the allocation ends at their end)
  std::size_t page_bytes;  // without the guard page after them
};
struct Arena {
  std::mutex mutex;
  char* base = nullptr;
  std::size_t used = 0, live_bytes = 0;
  std::map<std::uintptr_t, Allocation> live;  // by start
  int access_depth = 0;
};
Arena& arena() {
  static Arena a;
  return a;
}

// TESSERA_CUDA_EMULATOR_PROTECT=0 leaves device memory accessible (faster; no detection).
bool protecting() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_CUDA_EMULATOR_PROTECT");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

}  // namespace

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void checked_mprotect(void* p, std::size_t bytes, int prot) {
  if (bytes > 0 && mprotect(p, bytes, prot) != 0) {
    std::perror("cuda emulator: mprotect");
    std::abort();
  }
}

namespace {

// The whole range accessible or not, in one call: one call per live allocation made a training
// step 7x slower. (So while the emulator works, guard pages and freed ranges read as zeros; with
// TESSERA_CUDA_EMULATOR_PROTECT=0 they stay without access and a kernel reading them faults.)
void protect(Arena& a, bool accessible) {
  if (!protecting()) return;  // each allocation is made accessible once, in cudaMalloc
  checked_mprotect(a.base, a.used, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
}

}  // namespace

bool is_device_memory(const void* p, std::size_t bytes) {
  Arena& a = arena();
  std::lock_guard lock(a.mutex);
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = a.live.upper_bound(at);
  if (it == a.live.begin()) return false;
  --it;
  return at + bytes <= it->first + it->second.bytes;
}

bool in_device_range(const void* p) {
  Arena& a = arena();
  std::lock_guard lock(a.mutex);
  const auto at = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(a.base);
  return a.base != nullptr && at >= base && at < base + a.used;
}

DeviceAccess::DeviceAccess() {
  Arena& a = arena();
  std::lock_guard lock(a.mutex);
  if (a.access_depth++ == 0) protect(a, true);
}

DeviceAccess::~DeviceAccess() {
  Arena& a = arena();
  std::lock_guard lock(a.mutex);
  if (--a.access_depth == 0) protect(a, false);
}

}  // namespace tessera::cuda_emulator

using namespace tessera::cuda_emulator;

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  Arena& a = arena();
  std::lock_guard lock(a.mutex);
  if (a.base == nullptr) {
    void* p = mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
    a.base = static_cast<char*>(p);
  }
  const std::size_t size = bytes > 0 ? bytes : 1, page_bytes = round_up(size, page_size());
  if (a.live_bytes + page_bytes > kDeviceBytes || a.used + page_bytes + page_size() > kArenaBytes)
    return cudaErrorMemoryAllocation;
  char* pages = a.base + a.used;
  a.used += page_bytes + page_size();  // and a guard page
  if ((!protecting() || a.access_depth > 0) && mprotect(pages, page_bytes, PROT_READ | PROT_WRITE) != 0)
    return cudaErrorMemoryAllocation;
  char* p = pages + page_bytes - round_up(size, 256);
  a.live[reinterpret_cast<std::uintptr_t>(p)] = Allocation{size, pages, page_bytes};
  a.live_bytes += page_bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  Arena& a = arena();
  std::lock_guard lock(a.mutex);
  *free = kDeviceBytes - std::min(a.live_bytes, kDeviceBytes);
  *total = kDeviceBytes;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  cudaDeviceSynchronize();  // as on a GPU: queued work may still use it
  Arena& a = arena();
  std::lock_guard lock(a.mutex);
  auto it = a.live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == a.live.end()) return cudaErrorInvalidDevicePointer;
  const Allocation alloc = it->second;
  madvise(alloc.pages, alloc.page_bytes, MADV_DONTNEED);  // the pages go back; the range is never reused
  checked_mprotect(alloc.pages, alloc.page_bytes, PROT_NONE);
  a.live_bytes -= alloc.page_bytes;
  a.live.erase(it);
  return cudaSuccess;
}

namespace {

// A copy's ends: one in the device range must lie in one live allocation (also for
// cudaMemcpyDefault); an explicit kind must name where each end is.
cudaError_t check_copy(const void* dst, std::size_t dst_span, const void* src, std::size_t src_span,
                       cudaMemcpyKind kind) {
  const bool dst_device = in_device_range(dst), src_device = in_device_range(src);
  if ((dst_device && !is_device_memory(dst, dst_span)) || (src_device && !is_device_memory(src, src_span)))
    return cudaErrorInvalidValue;
  const bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dst_device && !src_device) ||
                  (kind == cudaMemcpyDeviceToHost && !dst_device && src_device) ||
                  (kind == cudaMemcpyDeviceToDevice && dst_device && src_device) ||
                  (kind == cudaMemcpyHostToHost && !dst_device && !src_device);
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t err = check_copy(dst, bytes, src, bytes, kind); err != cudaSuccess) return err;
  wait_before_work(stream);
  DeviceAccess access;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  const auto limit = static_cast<std::size_t>(max_pitch());
  if (dpitch > limit || spitch > limit) return cudaErrorInvalidPitchValue;
  if (width == 0 || height == 0) return cudaSuccess;
  const std::size_t dst_span = dpitch * (height - 1) + width, src_span = spitch * (height - 1) + width;
  if (const cudaError_t err = check_copy(dst, dst_span, src, src_span, kind); err != cudaSuccess) return err;
  wait_before_work(stream);
  DeviceAccess access;
  for (std::size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) { return cudaMemsetAsync(dst, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_memory(dst, bytes)) return cudaErrorInvalidValue;
  wait_before_work(stream);
  DeviceAccess access;
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
