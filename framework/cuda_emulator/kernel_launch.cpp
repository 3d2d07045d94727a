// Tessera's CUDA emulator: kernel launches, their threads run as fibers, and what device code calls
// (__syncthreads, warp shuffles, shared memory; see include/cuda_runtime.h for what is emulated and
// checked). Memory, devices and streams are in memory.cpp, devices.cpp and streams.cpp.
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

#include "runtime_internal.h"

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

namespace tessera::cuda_emulator {
namespace {

std::mutex g_attr_mutex;
std::map<const void*, int> g_max_dynamic_shared;

// A cp.async copy: the source's bytes (read at issue; zeros past src_bytes) land at completion.
struct AsyncCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  std::size_t size;
};

// ---- fibers (Boost.Context: a switch costs nanoseconds, where swapcontext makes two system calls) ----
enum class State { ready, at_block_barrier, at_warp_op, done };
struct Fiber {
  boost::context::fiber self;       // where the scheduler resumes it
  boost::context::fiber scheduler;  // where it yields to
  State state = State::ready;
  const char* warp_op = nullptr;
  std::uint64_t exchange_in = 0, exchange_out = 0;
  int lane_mask = 0;
  // A gather (warp_gather): this lane's bytes, and where all 32 lanes' go.
  const void* gather_in = nullptr;
  void* gather_out = nullptr;
  std::size_t gather_bytes = 0;
  // cp.async copies: issued but not committed, and committed groups, oldest first.
  std::vector<AsyncCopy> copies_open;
  std::vector<std::vector<AsyncCopy>> copy_groups;
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
  std::size_t shared_bytes = 0;
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

// For a gather (mma.sync, ldmatrix) that warp w's live lanes wait at: gives each lane all 32
// lanes' bytes. These instructions take every lane (.aligned): a missing or exited one is an error.
std::string release_gather(Block& b, int w) {
  const int n = static_cast<int>(b.fibers.size()), w0 = 32 * w;
  const Fiber& first = b.fibers[static_cast<std::size_t>(w0)];
  bool any = false;
  for (int t = w0; t < w0 + 32 && t < n; ++t) any = any || b.fibers[static_cast<std::size_t>(t)].gather_in != nullptr;
  if (!any) return {};
  for (int t = w0; t < w0 + 32; ++t) {
    const bool live = t < n && b.fibers[static_cast<std::size_t>(t)].state == State::at_warp_op;
    if (!live || b.fibers[static_cast<std::size_t>(t)].gather_bytes != first.gather_bytes)
      return std::string(first.warp_op) + ": lane " + std::to_string(t - w0) + " of warp " + std::to_string(w) +
             " is not at it (exited, or a partial warp): it takes every lane of the warp";
  }
  for (int t = w0; t < w0 + 32; ++t) {
    Fiber& f = b.fibers[static_cast<std::size_t>(t)];
    for (int from = 0; from < 32; ++from)
      std::memcpy(static_cast<unsigned char*>(f.gather_out) + from * f.gather_bytes,
                  b.fibers[static_cast<std::size_t>(w0 + from)].gather_in, f.gather_bytes);
  }
  for (int t = w0; t < w0 + 32; ++t) b.fibers[static_cast<std::size_t>(t)].gather_in = nullptr;
  return {};
}

// Completes a thread's cp.async groups but the newest `keep`.
void complete_copies(Fiber& f, std::size_t keep) {
  while (f.copy_groups.size() > keep) {
    for (const AsyncCopy& c : f.copy_groups.front()) std::memcpy(c.dst, c.bytes, c.size);
    f.copy_groups.erase(f.copy_groups.begin());
  }
}

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
  const std::string gathered = release_gather(b, w);
  if (!gathered.empty()) return gathered;
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
    // Copies still in flight land before the thread's end is seen (uncommitted ones too).
    f.copy_groups.push_back(std::move(f.copies_open));
    f.copies_open.clear();
    complete_copies(f, 0);
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

void warp_gather(const char* op, const void* mine, std::size_t bytes, void* all) {
  Fiber& f = current_fiber(op);
  f.state = State::at_warp_op;
  f.warp_op = op;
  f.lane_mask = 0;
  f.gather_in = mine;
  f.gather_out = all;
  f.gather_bytes = bytes;
  yield(*t_block);
}

bool is_shared_memory(const void* p, std::size_t bytes) {
  current_fiber("a shared memory address");
  const auto* q = static_cast<const unsigned char*>(p);
  return q >= t_block->shared && q + bytes <= t_block->shared + t_block->shared_bytes;
}

void cp_async(void* shared_dst, const void* global_src, std::size_t bytes, std::size_t src_bytes) {
  Fiber& f = current_fiber("cp.async");
  if (bytes != 16 || src_bytes > bytes) fault("cp.async.cg: 16 bytes, and a source size of at most 16");
  if (reinterpret_cast<std::uintptr_t>(shared_dst) % 16 != 0 || reinterpret_cast<std::uintptr_t>(global_src) % 16 != 0)
    fault("cp.async.cg: source and destination must be 16-byte aligned");
  if (!is_shared_memory(shared_dst, bytes)) fault("cp.async: the destination is not dynamic shared memory");
  if (src_bytes > 0 && !is_device_memory(global_src, src_bytes))
    fault("cp.async: the source is not device memory (or runs past its allocation)");
  AsyncCopy c{static_cast<unsigned char*>(shared_dst), {}, bytes};
  std::memset(c.bytes, 0, sizeof c.bytes);
  std::memcpy(c.bytes, global_src, src_bytes);
  // Undefined until the copy's group is waited for: NaN bytes meanwhile, so an early read shows.
  std::memset(shared_dst, 0xff, bytes);
  f.copies_open.push_back(c);
}

void cp_async_commit() {
  Fiber& f = current_fiber("cp.async.commit_group");
  f.copy_groups.push_back(std::move(f.copies_open));
  f.copies_open.clear();
}

void cp_async_wait(int pending) {
  Fiber& f = current_fiber("cp.async.wait_group");
  if (pending < 0) fault("cp.async.wait_group: a negative count");
  complete_copies(f, static_cast<std::size_t>(pending));
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
  b.shared_bytes = c.shared_bytes;
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
