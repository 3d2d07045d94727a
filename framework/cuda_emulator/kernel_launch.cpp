// Tessera's CUDA emulator: device memory, streams and events, and kernel launches run as fibers
// (see include/cuda_runtime.h for what is emulated and checked).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

namespace tessera::cuda_emulator {
namespace {

// ---- device memory: one reserved range, handed out upwards, never reused ----
// Outside the emulator's own work it has no access, so host code reading a device pointer faults.
// Each allocation ends flush against its last page (256-byte aligned, as cudaMalloc's) with a
// guard page after it, so a read past its end does not land in a neighbour (see protect()). A
// freed allocation's pages go back to the system and its range is never reused. Copies and
// kernel arguments are checked against the live allocations.
constexpr std::size_t kArenaBytes = std::size_t{1} << 38;    // 256 GiB of address space, not memory
constexpr std::size_t kDeviceBytes = std::size_t{16} << 30;  // what the emulated GPU reports

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
std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// TESSERA_CUDA_EMULATOR_PROTECT=0 leaves device memory accessible (faster; no detection).
bool protecting() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_CUDA_EMULATOR_PROTECT");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

void checked_mprotect(void* p, std::size_t bytes, int prot) {
  if (bytes > 0 && mprotect(p, bytes, prot) != 0) {
    std::perror("cuda emulator: mprotect");
    std::abort();
  }
}

// The whole range accessible or not, in one call: one call per live allocation made a training
// step 7x slower. (So while the emulator works, guard pages and freed ranges read as zeros; with
// TESSERA_CUDA_EMULATOR_PROTECT=0 they stay without access and a kernel reading them faults.)
void protect(Arena& a, bool accessible) {
  if (!protecting()) return;  // each allocation is made accessible once, in cudaMalloc
  checked_mprotect(a.base, a.used, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
}

// ---- errors ----
thread_local cudaError_t t_last_error = cudaSuccess;
// The first error stays, but a failure replaces a "not ready" kept from cudaEventQuery.
void set_error(cudaError_t err) {
  if (t_last_error == cudaSuccess || (t_last_error == cudaErrorNotReady && err != cudaErrorNotReady))
    t_last_error = err;
}
// What a synchronization returns: a failure so far, not a stale "not ready".
cudaError_t sync_result() { return t_last_error == cudaErrorNotReady ? cudaSuccess : t_last_error; }

// ---- devices ----
thread_local int t_device = 0;
int device_count() {
  const char* v = std::getenv("TESSERA_CUDA_EMULATOR_DEVICES");
  const int n = v != nullptr ? std::atoi(v) : 8;
  return n < 0 ? 0 : n;
}
constexpr int kSharedOptin = 232448;  // H100: 227 KB of shared memory per block, opted in
constexpr int kSharedDefault = 48 * 1024;
// The largest pitch of a 2D copy: A100, H100 and H200 report 2 GiB - 1 bytes. A test may set a
// smaller one (TESSERA_CUDA_EMULATOR_MAX_PITCH) to reach the limit without gigabytes of memory.
int max_pitch() {
  const char* v = std::getenv("TESSERA_CUDA_EMULATOR_MAX_PITCH");
  const int n = v != nullptr ? std::atoi(v) : 0;
  return n > 0 ? n : 2147483647;
}

std::mutex g_attr_mutex;
std::map<const void*, int> g_max_dynamic_shared;

// ---- fibers (Boost.Context: a switch costs nanoseconds, where swapcontext makes two system calls) ----
enum class State { ready, at_block_barrier, at_warp_op, done };
struct Fiber {
  boost::context::fiber self;       // where the scheduler resumes it
  boost::context::fiber scheduler;  // where it yields to
  State state = State::ready;
  const char* warp_op = nullptr;
  std::uint64_t exchange_in = 0, exchange_out = 0;
  int lane_mask = 0;
};

// A wmma call as the first lane of its warp to make it made it.
struct WarpCall {
  const char* op;
  std::uint64_t arguments;
  int lane;
};

struct Block {
  std::vector<Fiber> fibers;
  ThreadBody* body = nullptr;
  int current = -1;
  unsigned char* shared = nullptr;
  std::string fault;  // set by a faulting fiber
  // wmma calls must be the whole warp's, with the same arguments: each warp's sequence of calls
  // (the first lane to make the k-th call records it, the others must match it) and how many
  // each thread has made (equal across the warp once the block ends).
  std::vector<std::vector<WarpCall>> warp_calls;  // by warp
  std::vector<std::size_t> calls_made;            // by thread
};
thread_local Block* t_block = nullptr;
thread_local std::vector<const void*> t_poisoned_static_shared;  // in the current block

// Fiber stacks, kept for the next block: 256 KB each, a guard page below each so that an overflow
// faults instead of corrupting the next one.
constexpr std::size_t kStackBytes = 256 * 1024;
thread_local std::vector<char*> t_free_stacks;
struct PooledStack {
  boost::context::stack_context allocate() {
    if (t_free_stacks.empty()) {
      void* p = mmap(nullptr, kStackBytes + page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        std::perror("cuda emulator: mmap of a fiber stack");
        std::abort();
      }
      checked_mprotect(p, page_size(), PROT_NONE);
      t_free_stacks.push_back(static_cast<char*>(p) + page_size());
    }
    boost::context::stack_context sc;
    sc.sp = t_free_stacks.back() + kStackBytes;  // stacks grow down from here
    sc.size = kStackBytes;
    t_free_stacks.pop_back();
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept {
    t_free_stacks.push_back(static_cast<char*>(sc.sp) - kStackBytes);
  }
};

void set_thread_index(int t) {
  threadIdx = uint3{static_cast<unsigned>(t) % blockDim.x, static_cast<unsigned>(t) / blockDim.x % blockDim.y,
                    static_cast<unsigned>(t) / (blockDim.x * blockDim.y)};
}

void yield(Block& b) {
  Fiber& f = b.fibers[static_cast<std::size_t>(b.current)];
  f.scheduler = std::move(f.scheduler).resume();
}

std::string describe(dim3 d) { return std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z); }

// Releases warp w's lanes when all its live lanes wait at a warp operation. As on the GPU, lanes
// that have exited (or that a partial warp lacks) take no part: a shuffle reading one gets NaN
// bits (0xff bytes; the GPU's value is undefined). Returns an error message when live lanes wait
// at different warp operations.
std::string release_warp(Block& b, int w) {
  const int n = static_cast<int>(b.fibers.size()), w0 = 32 * w;
  const char* op = nullptr;
  for (int t = w0; t < w0 + 32 && t < n; ++t) {
    const Fiber& f = b.fibers[static_cast<std::size_t>(t)];
    if (f.state == State::done) continue;
    if (f.state != State::at_warp_op) return {};  // a lane still runs or waits at __syncthreads
    if (op != nullptr && std::strcmp(op, f.warp_op) != 0)
      return "lanes of warp " + std::to_string(w) + " wait at different warp operations (" + op + ", " + f.warp_op +
             ")";
    op = f.warp_op;
  }
  if (op == nullptr) return {};
  for (int t = w0; t < w0 + 32 && t < n; ++t) {
    Fiber& f = b.fibers[static_cast<std::size_t>(t)];
    if (f.state != State::at_warp_op) continue;
    const int from = w0 + ((t - w0) ^ f.lane_mask);
    const bool gone = from >= n || b.fibers[static_cast<std::size_t>(from)].state == State::done;
    f.exchange_out = gone ? ~std::uint64_t{0} : b.fibers[static_cast<std::size_t>(from)].exchange_in;
    f.state = State::ready;
  }
  return {};
}

void start_fiber(Block& b, std::size_t t) {
  Fiber& f = b.fibers[t];
  f.state = State::ready;
  f.self = boost::context::fiber(std::allocator_arg, PooledStack{}, [&b, &f](boost::context::fiber&& scheduler) {
    f.scheduler = std::move(scheduler);
    b.body->run();
    f.state = State::done;
    return std::move(f.scheduler);
  });
}

// At a block's end: a warp whose lanes made different numbers of wmma calls (some skipped or
// exited before one), or a partial warp that made any.
std::string uneven_warp_calls(const Block& b) {
  const std::size_t n = b.fibers.size();
  for (std::size_t w = 0; w < b.warp_calls.size(); ++w) {
    const std::vector<WarpCall>& calls = b.warp_calls[w];
    if (calls.empty()) continue;
    if (32 * w + 32 > n)
      return std::string(calls.front().op) + " in warp " + std::to_string(w) + " of " + std::to_string(n - 32 * w) +
             " threads: wmma takes a whole warp";
    for (std::size_t t = 32 * w; t < 32 * w + 32; ++t) {
      const std::size_t made = b.calls_made[t];  // at most calls.size(): a lane's extra call is recorded
      if (made != calls.size())
        return "lane " + std::to_string(t - 32 * w) + " of warp " + std::to_string(w) + " made " +
               std::to_string(made) + " wmma calls, lane " + std::to_string(calls.back().lane) + " " +
               std::to_string(calls.size()) + " (the first it missed: " + calls[made].op +
               "): wmma takes every lane of the warp";
    }
  }
  return {};
}

// Runs one block to its end; returns a fault's description, or an empty string. Each warp runs
// as far as it can (to __syncthreads or its end) before the next starts, so warps are as far apart
// as a GPU may put them: a read of shared memory another warp has yet to write, or has already
// overwritten, shows. `descending` reverses the order of warps and of lanes.
std::string run_block(Block& b, bool descending) {
  const int n = static_cast<int>(b.fibers.size()), warps = (n + 31) / 32;
  for (std::size_t t = 0; t < b.fibers.size(); ++t) start_fiber(b, t);
  for (;;) {
    for (int i = 0; i < warps; ++i) {
      const int w = descending ? warps - 1 - i : i;
      const int lanes = n - 32 * w < 32 ? n - 32 * w : 32;
      for (bool ran = true; ran;) {
        ran = false;
        for (int j = 0; j < lanes; ++j) {
          const int t = 32 * w + (descending ? lanes - 1 - j : j);
          Fiber& f = b.fibers[static_cast<std::size_t>(t)];
          if (f.state != State::ready) continue;
          b.current = t;
          set_thread_index(t);
          f.self = std::move(f.self).resume();
          if (!b.fault.empty()) return b.fault;
          ran = true;
        }
        const std::string stuck = release_warp(b, w);
        if (!stuck.empty()) return stuck;
      }
    }
    // Every warp waits at __syncthreads or has ended.
    int at_barrier = 0, at_warp = 0, done = 0;
    for (const Fiber& f : b.fibers) {
      at_barrier += f.state == State::at_block_barrier;
      at_warp += f.state == State::at_warp_op;
      done += f.state == State::done;
    }
    if (done == n) return uneven_warp_calls(b);
    if (at_warp > 0)
      return "deadlock: " + std::to_string(at_barrier) + " threads wait at __syncthreads while " +
             std::to_string(at_warp) + " wait at a warp operation";
    for (Fiber& f : b.fibers)
      if (f.state == State::at_block_barrier) f.state = State::ready;
  }
}

Fiber& current_fiber(const char* what) {
  if (t_block == nullptr) {
    std::fprintf(stderr, "cuda emulator: %s called outside a kernel\n", what);
    std::abort();
  }
  return t_block->fibers[static_cast<std::size_t>(t_block->current)];
}

}  // namespace

// ---- device-side services ----
int linear_thread() {
  current_fiber("a thread index");
  return t_block->current;
}

void fault(const char* what) {
  current_fiber(what);
  t_block->fault = what;
  yield(*t_block);
  std::abort();  // not reached: a faulted fiber is only unwound (when its block is destroyed)
}

void sync_block() {
  Fiber& f = current_fiber("__syncthreads");
  f.state = State::at_block_barrier;
  yield(*t_block);
}

void sync_warp(unsigned mask, const char* what) {
  if (mask != 0xffffffffu) fault("a warp operation with a partial mask: the emulator has full masks only");
  Fiber& f = current_fiber(what);
  f.state = State::at_warp_op;
  f.warp_op = what;
  f.lane_mask = 0;
  yield(*t_block);
}

std::uint64_t exchange(unsigned mask, std::uint64_t bits, int lane_mask) {
  if (mask != 0xffffffffu) fault("a warp shuffle with a partial mask: the emulator has full masks only");
  if (lane_mask < 0 || lane_mask > 31) fault("__shfl_xor_sync: lane mask out of [0, 31]");
  Fiber& f = current_fiber("__shfl_xor_sync");
  f.state = State::at_warp_op;
  f.warp_op = "__shfl_xor_sync";
  f.exchange_in = bits;
  f.lane_mask = lane_mask;
  yield(*t_block);
  return f.exchange_out;
}

void uniform_warp_call(const char* op, std::uint64_t arguments) {
  current_fiber(op);
  Block& b = *t_block;
  const auto t = static_cast<std::size_t>(b.current), w = t / 32;
  std::vector<WarpCall>& calls = b.warp_calls[w];
  const std::size_t k = b.calls_made[t]++;
  if (k == calls.size()) {
    calls.push_back(WarpCall{op, arguments, static_cast<int>(t % 32)});
    return;
  }
  const WarpCall& first = calls[k];
  if (std::strcmp(first.op, op) != 0 || first.arguments != arguments) {
    const std::string why = "wmma call " + std::to_string(k + 1) + " of warp " + std::to_string(w) + ": lane " +
                            std::to_string(t % 32) + " calls " + op + ", lane " + std::to_string(first.lane) + " " +
                            first.op + (std::strcmp(first.op, op) == 0 ? " with other arguments" : "") +
                            ": wmma takes every lane of the warp, with the same arguments";
    fault(why.c_str());
  }
}

void poison_static_shared(void* array, std::size_t bytes) {
  current_fiber("static shared memory");
  for (const void* p : t_poisoned_static_shared)
    if (p == array) return;
  std::memset(array, 0xff, bytes);
  t_poisoned_static_shared.push_back(array);
}

unsigned char* dynamic_shared() {
  current_fiber("dynamic shared memory");
  return t_block->shared;
}

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

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || bytes > kSharedOptin) return cudaErrorInvalidValue;
  std::lock_guard lock(g_attr_mutex);
  g_max_dynamic_shared[kernel] = bytes;
  return cudaSuccess;
}

void run_grid(const void* kernel, const char* name, const Config& c, const void* const* pointers, std::size_t count,
              ThreadBody& body) {
  const auto fail = [&](cudaError_t err, const std::string& why) {
    std::fprintf(stderr, "cuda emulator: %s: %s\n", name, why.c_str());
    set_error(err);
  };
  const std::uint64_t threads = std::uint64_t{c.block.x} * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64)
    return fail(cudaErrorInvalidConfiguration, "block (" + describe(c.block) + ") is not 1 to 1024 threads");
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535)
    return fail(cudaErrorInvalidConfiguration, "grid (" + describe(c.grid) + ") out of the GPU's limits");
  int allowed = kSharedDefault;
  {
    std::lock_guard lock(g_attr_mutex);
    auto it = g_max_dynamic_shared.find(kernel);
    if (it != g_max_dynamic_shared.end()) allowed = it->second;
  }
  if (c.shared_bytes > static_cast<std::size_t>(allowed))
    return fail(cudaErrorInvalidValue, std::to_string(c.shared_bytes) + " bytes of dynamic shared memory, over the " +
                                           std::to_string(allowed) + " allowed (cudaFuncSetAttribute)");
  for (std::size_t i = 0; i < count; ++i)
    if (pointers[i] != nullptr && !is_device_memory(pointers[i], 1)) {
      char at[32];
      std::snprintf(at, sizeof at, "%p", pointers[i]);
      return fail(cudaErrorIllegalAddress,
                  "argument " + std::to_string(i) + " (" + at + ") is not device memory (a host pointer, or freed)");
    }
  if (t_block != nullptr) return fail(cudaErrorLaunchFailure, "a launch from device code");

  wait_before_work(c.stream);
  DeviceAccess access;
  Block b;
  b.fibers.resize(threads);
  b.warp_calls.resize((threads + 31) / 32);
  b.calls_made.resize(threads);
  b.body = &body;
  std::vector<unsigned char> shared_storage(c.shared_bytes + 128);
  const auto shared_at = round_up(reinterpret_cast<std::uintptr_t>(shared_storage.data()), 128);
  b.shared = reinterpret_cast<unsigned char*>(shared_at);
  gridDim = c.grid;
  blockDim = c.block;
  t_block = &b;
  // Blocks run one after another: in ascending order on even launches, descending on odd ones (a
  // block reading what another writes shows); threads ascending in alternate blocks, starting
  // with the other direction on odd launches (a one-block launch gets both).
  thread_local std::uint64_t launches = 0;
  const bool odd_launch = launches++ % 2 == 1;
  const std::uint64_t blocks = std::uint64_t{c.grid.x} * c.grid.y * c.grid.z;
  for (std::uint64_t i = 0; i < blocks; ++i) {
    const std::uint64_t linear = odd_launch ? blocks - 1 - i : i;
    blockIdx = uint3{static_cast<unsigned>(linear % c.grid.x), static_cast<unsigned>(linear / c.grid.x % c.grid.y),
                     static_cast<unsigned>(linear / (std::uint64_t{c.grid.x} * c.grid.y))};
    std::memset(b.shared, 0xff, c.shared_bytes);  // NaN in float32 and bfloat16
    t_poisoned_static_shared.clear();
    for (auto& calls : b.warp_calls) calls.clear();
    std::fill(b.calls_made.begin(), b.calls_made.end(), 0);
    const std::string fault = run_block(b, (linear + (odd_launch ? 1 : 0)) % 2 == 1);
    if (!fault.empty()) {
      t_block = nullptr;
      return fail(cudaErrorLaunchFailure,
                  "block (" + describe(dim3(blockIdx.x, blockIdx.y, blockIdx.z)) + "): " + fault);
    }
  }
  t_block = nullptr;
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
cudaError_t cudaDeviceSynchronize();  // below, with the streams
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

// ---- streams and events ----
// Kernels, copies and cuBLAS run when queued, so what a stream holds is StreamWork (NCCL): each
// queued piece knows what it waits for, and the last one queued on a stream stands for them all.
namespace tessera::cuda_emulator {

struct Queued {
  std::unique_ptr<StreamWork> work;
  std::vector<std::shared_ptr<Queued>> after;  // what it waits for
  bool started = false, done = false;
};

namespace {

using QueuedList = std::vector<std::shared_ptr<Queued>>;

// Advances `p` (after what it waits for) as far as it goes without blocking, or to its end.
bool progress(const std::shared_ptr<Queued>& p, bool block) {
  if (p == nullptr || p->done) return true;
  for (const auto& a : p->after)
    if (!progress(a, block)) return false;
  if (!p->started) {
    p->started = true;
    p->work->start();
  }
  if (!p->work->finish(block)) return false;
  p->done = true;
  p->work.reset();
  p->after.clear();  // no chain of finished work kept alive
  return true;
}
// Whether all of `list` is done (with `block`, once it is); the finished ones are dropped.
bool progress_all(QueuedList& list, bool block) {
  bool all = true;
  for (const auto& p : list) all = progress(p, block) && all;
  std::erase_if(list, [](const std::shared_ptr<Queued>& p) { return p == nullptr || p->done; });
  return all;
}

}  // namespace
}  // namespace tessera::cuda_emulator

struct CUstream_st {
  unsigned flags;
  std::shared_ptr<tessera::cuda_emulator::Queued> last;  // done once all queued on it is
  tessera::cuda_emulator::QueuedList waits;              // cudaStreamWaitEvent's, for what is queued next
};
struct CUevent_st {
  unsigned flags;
  bool recorded;
  tessera::cuda_emulator::QueuedList waits_for;  // done: the event has happened
};

namespace tessera::cuda_emulator {
namespace {

std::mutex g_stream_mutex;             // guards the lists; CUDA calls must come from one thread (see the header)
CUstream_st g_legacy{0, nullptr, {}};  // the default stream (0)
std::vector<CUstream_st*> g_streams;   // created ones
QueuedList g_orphans;                  // destroyed streams' work, still to complete

CUstream_st& resolve(cudaStream_t s) { return s != nullptr ? *s : g_legacy; }
bool blocking(const CUstream_st& s) { return (s.flags & cudaStreamNonBlocking) == 0; }

// What work queued on `s` now waits for: the stream's own, its cudaStreamWaitEvent's, and the
// legacy default stream's ties (its work waits for blocking streams' and theirs for its).
QueuedList prerequisites(cudaStream_t s) {
  CUstream_st& st = resolve(s);
  QueuedList out = st.waits;
  out.push_back(st.last);
  const auto tie = [&out](const CUstream_st& other) {
    out.insert(out.end(), other.waits.begin(), other.waits.end());
    out.push_back(other.last);
  };
  if (s == nullptr) {
    for (CUstream_st* other : g_streams)
      if (blocking(*other)) tie(*other);
  } else if (blocking(st)) {
    tie(g_legacy);
  }
  std::erase_if(out, [](const std::shared_ptr<Queued>& p) { return p == nullptr || p->done; });
  return out;
}

// Everything queued anywhere, done (cudaDeviceSynchronize, cudaFree).
void wait_for_device() {
  QueuedList all = g_orphans;
  for (CUstream_st* st : g_streams) {
    all.insert(all.end(), st->waits.begin(), st->waits.end());
    all.push_back(st->last);
  }
  all.insert(all.end(), g_legacy.waits.begin(), g_legacy.waits.end());
  all.push_back(g_legacy.last);
  progress_all(all, true);
  g_orphans.clear();
}

}  // namespace

std::shared_ptr<Queued> enqueue(cudaStream_t stream, std::unique_ptr<StreamWork> work,
                                const std::shared_ptr<Queued>& also_after) {
  std::lock_guard lock(g_stream_mutex);
  auto p = std::make_shared<Queued>();
  p->work = std::move(work);
  p->after = prerequisites(stream);
  if (also_after != nullptr && !also_after->done) p->after.push_back(also_after);
  CUstream_st& st = resolve(stream);
  st.waits.clear();  // p waits for them: the next work waits for p
  st.last = p;
  // Started at once when nothing holds it back (as a GPU would run it now); otherwise by the
  // query or synchronization that finds what it waits for done. Nothing is finished here: the
  // first check of a piece of work is the caller's.
  for (const auto& a : p->after)
    if (!a->done) return p;
  p->started = true;
  p->work->start();
  return p;
}

void wait_for(const std::shared_ptr<Queued>& work) {
  std::lock_guard lock(g_stream_mutex);
  progress(work, true);
}

void wait_before_work(cudaStream_t stream) {
  std::lock_guard lock(g_stream_mutex);
  QueuedList before = prerequisites(stream);
  progress_all(before, true);
  resolve(stream).waits.clear();
}

void report_failure(cudaError_t err, const char* what) {
  std::fprintf(stderr, "cuda emulator: %s\n", what);
  set_error(err);
}

}  // namespace tessera::cuda_emulator

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  std::lock_guard lock(g_stream_mutex);
  *stream = new CUstream_st{flags, nullptr, {}};
  g_streams.push_back(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  // As on a GPU, its work goes on (and cudaDeviceSynchronize waits for it).
  g_orphans.push_back(stream->last);
  std::erase(g_streams, stream);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  {
    std::lock_guard lock(g_stream_mutex);
    CUstream_st& st = resolve(stream);
    QueuedList mine = st.waits;
    mine.push_back(st.last);
    progress_all(mine, true);
  }
  return sync_result();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (event == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  QueuedList& waits = resolve(stream).waits;
  waits.insert(waits.end(), event->waits_for.begin(), event->waits_for.end());
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = new CUevent_st{flags, false, {}};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  event->recorded = true;
  event->waits_for = prerequisites(stream);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidValue;
  {
    std::lock_guard lock(g_stream_mutex);
    progress_all(event->waits_for, true);
  }
  return sync_result();
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  if (progress_all(event->waits_for, false)) return sync_result();
  set_error(cudaErrorNotReady);  // kept as the last error too, as the runtime may
  return cudaErrorNotReady;
}
cudaError_t cudaDeviceSynchronize() {
  {
    std::lock_guard lock(g_stream_mutex);
    wait_for_device();
  }
  return sync_result();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr || (start->flags & cudaEventDisableTiming) ||
      (end->flags & cudaEventDisableTiming))
    return cudaErrorInvalidValue;
  *ms = 0.0f;  // no timing in the emulator
  return cudaSuccess;
}
