#include "tensor/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/counters.h"
#include "common/error.h"

// ASAN_(UN)POISON_MEMORY_REGION: no-ops unless built with AddressSanitizer.
#include <sanitizer/asan_interface.h>

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera {

// Blocks under 4 KiB: multiples of 64 bytes (aligned_alloc's rule). Larger ones round up to a size
// class (eight classes per power of two, at most 12.5% larger), so that the slightly different
// shapes of successive batches reuse the same blocks: with exact sizes, every new batch shape
// missed the cache, the cache filled with sizes never asked for again, and the steady state was
// page faults (a training run slowed 3x over ten minutes).
std::size_t allocation_block_size(std::size_t bytes) {
  constexpr std::size_t kSmall = 4096;
  if (bytes <= kSmall) return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  std::size_t pow2 = kSmall;
  while (pow2 * 2 <= bytes) pow2 *= 2;
  const std::size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

namespace {

// Caches freed blocks by size class for the next allocation of that class. `System` supplies the
// real allocation (aligned host memory, or cudaMalloc) and its release, and marks what of a block
// may be touched (see HostSystem).
template <typename System>
class BlockCache {
 public:
  BlockCache(std::size_t limit, std::size_t cap) : limit_(limit), cap_(cap) {}

  void* allocate(std::size_t bytes) {
    const std::size_t size = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached -= size;
        note_in_use(size);
        System::expose(p, bytes, size);
        return p;
      }
    }
    void* p = within_cap(size) ? System::allocate(size) : nullptr;
    if (p == nullptr) {  // give the cache back to the system and try once more
      release();
      p = within_cap(size) ? System::allocate(size) : nullptr;
    }
    if (p == nullptr) throw_out_of_memory(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[p] = size;
    ++stats_.system_allocations;
    note_in_use(size);
    System::expose(p, bytes, size);
    return p;
  }

  void deallocate(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t size = sizes_.at(p);
    stats_.in_use -= size;
    if (stats_.cached + size <= limit_) {
      free_[size].push_back(p);
      stats_.cached += size;
      System::expose(p, 0, size);
    } else {
      sizes_.erase(p);
      System::release(p, size);
    }
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) {
        sizes_.erase(p);
        System::release(p, size);
      }
    }
    free_.clear();
    stats_.cached = 0;
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_in_use = stats_.in_use;
  }

 private:
  static std::size_t block_size(std::size_t bytes) { return allocation_block_size(bytes); }

  // Whether a new block of `size` keeps what is reserved within the cap (0: no cap).
  bool within_cap(std::size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    return cap_ == 0 || stats_.reserved() + size <= cap_;
  }

  [[noreturn]] void throw_out_of_memory(std::size_t bytes) {
    const auto size = [](std::size_t b) {
      const auto v = static_cast<double>(b);
      return v >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024))
                                       : fmt::format("{:.1f} MiB", v / (1024.0 * 1024));
    };
    const MemoryStats s = stats();
    const std::string why = cap_ != 0 && s.reserved() + block_size(bytes) > cap_
                                ? fmt::format("over the cap of {} ({})", size(cap_), System::kCapVariable)
                                : System::last_error();
    throw OutOfMemory(fmt::format(
        "out of {} memory: allocating {} bytes ({}) failed: {}; the allocator holds {} in use, {} reserved, peak {} "
        "in use",
        System::kName, bytes, size(bytes), why, size(s.in_use), size(s.reserved()), size(s.peak_in_use)));
  }

  void note_in_use(std::size_t size) {
    stats_.in_use += size;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  }

  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::unordered_map<void*, std::size_t> sizes_;
  MemoryStats stats_;
  std::size_t limit_;
  std::size_t cap_;
};

// The cache limit in bytes from `env_name` (megabytes: decimal digits, spaces around allowed, up to
// 2^43, 8 EiB), else the default. Anything else is an error naming the variable: stoull took "-1"
// as 2^64 - 1 and "1e3" as 1, and said only "stoull" for "abc".
std::size_t cache_limit(const char* env_name, std::size_t default_mb) {
  const char* env = std::getenv(env_name);
  if (env == nullptr) return default_mb << 20;
  constexpr std::uint64_t kMaxMb = std::uint64_t{1} << 43;
  std::string_view text = env;
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  std::uint64_t mb = 0;
  bool ok = !text.empty();
  for (const char c : text) {
    ok = ok && c >= '0' && c <= '9' && mb <= kMaxMb;  // mb <= 2^43 before: no overflow below
    if (ok) mb = mb * 10 + static_cast<std::uint64_t>(c - '0');
  }
  TESSERA_CHECK(ok && mb <= kMaxMb, "{}='{}': expected a whole number of megabytes in [0, {}]", env_name, env, kMaxMb);
  return static_cast<std::size_t>(mb) << 20;
}

struct HostSystem {
  static constexpr const char* kName = "host";
  static constexpr const char* kCapVariable = "TESSERA_HOST_MEMORY_LIMIT_MB";
  static void* allocate(std::size_t size) { return std::aligned_alloc(kTensorAlignment, size); }
  static void release(void* p, std::size_t size) {
    ASAN_UNPOISON_MEMORY_REGION(p, size);
    std::free(p);
  }
  static std::string last_error() { return "out of memory"; }
  // Under AddressSanitizer only the `bytes` a tensor asked for may be touched: a read or write past
  // its end (within the block's rounding up) or of a freed tensor (its block cached) is reported,
  // as malloc's blocks would be; without the cache's own marks both went unseen.
  static void expose(void* p, std::size_t bytes, std::size_t size) {
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);
    ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, size - bytes);
  }
};

BlockCache<HostSystem>& host_cache() {
  static auto* cache = new BlockCache<HostSystem>(cache_limit("TESSERA_HOST_CACHE_MB", 512),  // never destroyed:
                                                  cache_limit(HostSystem::kCapVariable, 0));
  return *cache;  // tensors may outlive statics
}

#ifdef TESSERA_WITH_CUDA
// Device blocks are used in the order of one compute stream: a block freed on the host while a
// kernel that uses it is still queued is safe to hand out again, because its next user is queued
// behind that kernel on the same stream. (Work on another stream, such as NCCL's, keeps its
// tensors alive until its event completes.)
struct DeviceSystem {
  static constexpr const char* kName = "CUDA device";
  static constexpr const char* kCapVariable = "TESSERA_DEVICE_MEMORY_LIMIT_MB";
  static void* allocate(std::size_t size) {
    void* p = nullptr;
    last_ = cudaMalloc(&p, size);
    if (last_ != cudaSuccess) {
      cudaGetLastError();  // clear the error before the retry
      return nullptr;
    }
    return p;
  }
  static void release(void* p, std::size_t /*size*/) { cudaFree(p); }
  static std::string last_error() { return std::string("cudaMalloc: ") + cudaGetErrorString(last_); }
  static void expose(void* /*p*/, std::size_t /*bytes*/, std::size_t /*size*/) {}  // not host memory
  static inline thread_local cudaError_t last_ = cudaSuccess;
};

BlockCache<DeviceSystem>& device_cache() {
  // No limit of its own: on out-of-memory the cache is released and the allocation retried.
  static auto* cache = new BlockCache<DeviceSystem>(cache_limit("TESSERA_DEVICE_CACHE_MB", std::size_t{1} << 40),
                                                    cache_limit(DeviceSystem::kCapVariable, 0));
  return *cache;
}
#endif

}  // namespace

MemoryStats host_memory_stats() { return host_cache().stats(); }
void release_cached_host_memory() { host_cache().release(); }
void reset_peak_host_memory() { host_cache().reset_peak(); }

MemoryStats device_memory_stats() {
#ifdef TESSERA_WITH_CUDA
  return device_cache().stats();
#else
  return {};
#endif
}

void release_cached_device_memory() {
#ifdef TESSERA_WITH_CUDA
  device_cache().release();
#endif
}

void reset_peak_device_memory() {
#ifdef TESSERA_WITH_CUDA
  device_cache().reset_peak();
#endif
}

std::size_t device_free_memory() {
#ifdef TESSERA_WITH_CUDA
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
#else
  return 0;
#endif
}

void* allocate(std::size_t bytes, Device device) {
  if (bytes == 0) bytes = kTensorAlignment;  // a valid, unique pointer for empty tensors
  if (device == Device::cpu) return host_cache().allocate(bytes);
#ifdef TESSERA_WITH_CUDA
  return device_cache().allocate(bytes);
#else
  fail("allocate: this build of Tessera has no CUDA support (configure with nvcc present)");
#endif
}

void deallocate(void* ptr, Device device) noexcept {
  if (ptr == nullptr) return;
  if (device == Device::cpu) {
    host_cache().deallocate(ptr);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  device_cache().deallocate(ptr);
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  if (dst_device == Device::cpu) {
    counters::add(counters::Event::device_to_host_copies);
    counters::add(counters::Event::device_to_host_bytes, static_cast<std::int64_t>(bytes));
  }
  if (src_device == Device::cpu) counters::add(counters::Event::host_to_device_copies);
  const cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  TESSERA_CHECK(err == cudaSuccess, "copy_bytes: cudaMemcpy of {} bytes failed: {}", bytes, cudaGetErrorString(err));
#else
  fail("copy_bytes: this build of Tessera has no CUDA support");
#endif
}

void zero_bytes(void* dst, Device device, std::size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    std::memset(dst, 0, bytes);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  const cudaError_t err = cudaMemsetAsync(dst, 0, bytes, nullptr);
  TESSERA_CHECK(err == cudaSuccess, "zero_bytes: cudaMemset of {} bytes failed: {}", bytes, cudaGetErrorString(err));
#else
  fail("zero_bytes: this build of Tessera has no CUDA support");
#endif
}

CudaDevice select_cuda_device(int local_rank) {
#ifdef TESSERA_WITH_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  TESSERA_CHECK(err == cudaSuccess && count > 0,
                "a GPU was asked for (train.device / --device cuda), but none answers on this machine ({})",
                err == cudaSuccess ? "no CUDA device" : cudaGetErrorString(err));
  // Where the launcher shows each rank only its own GPU (Slurm --gpus-per-task, CUDA_VISIBLE_DEVICES
  // per rank), count is 1 and every rank takes device 0; sharing is caught by comparing UUIDs.
  const int device = local_rank % count;
  const cudaError_t set = cudaSetDevice(device);
  TESSERA_CHECK(set == cudaSuccess, "cudaSetDevice({}) for local rank {} failed: {}", device, local_rank,
                cudaGetErrorString(set));
  CudaDevice d;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    d.description = fmt::format("cuda:{}", device);
    return d;
  }
  d.description = fmt::format("cuda:{} ({}, {:.1f} GiB)", device, prop.name,
                              static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  static_assert(sizeof(prop.uuid.bytes) == sizeof(d.uuid));
  std::memcpy(d.uuid.data(), prop.uuid.bytes, sizeof(d.uuid));
  return d;
#else
  (void)local_rank;
  fail(
      "a GPU was asked for (train.device / --device cuda), but this build of Tessera has no CUDA support (configure "
      "with -DTESSERA_CUDA=ON where nvcc is installed)");
#endif
}

void synchronize_device() {
#ifdef TESSERA_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return;
  }
  // The default (compute) stream only: communication on its own streams goes on.
  const cudaError_t err = cudaStreamSynchronize(nullptr);
  TESSERA_CHECK(err == cudaSuccess, "the GPU failed: {}", cudaGetErrorString(err));
#endif
}

bool cuda_available() { return cuda_unavailable_reason().empty(); }

std::string cuda_unavailable_reason() {
#ifdef TESSERA_WITH_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "insufficient driver" error
    return fmt::format("the CUDA runtime says: {} ({})", cudaGetErrorString(err), static_cast<int>(err));
  }
  return count > 0 ? "" : "the CUDA runtime sees no GPU";
#else
  return "this build has no CUDA (TESSERA_CUDA is off)";
#endif
}

}  // namespace tessera
