// Tessera's CUDA emulator: the part of the CUDA runtime Tessera uses, run on the CPU, so that
// every CUDA kernel and the whole GPU path (training in float32 and bfloat16, decoding, NCCL) run
// in CI against their CPU twins, where no GPU is. It is no substitute for the GPU check (no
// timing, no hardware rounding or scheduling), but it runs the kernels' own source:
//
// - Each block's threads are fibers on the launching thread, switched only at __syncthreads,
//   __syncwarp, warp shuffles and exits, so runs are deterministic. Each warp runs as far as it can
//   before the next starts; alternate blocks run warps and lanes in ascending and descending order,
//   and alternate launches run their blocks in ascending and descending order: a missing barrier
//   shows as a wrong result in one of them.
// - Launches are checked as the GPU checks them (block size, grid limits, dynamic shared memory
//   against cudaFuncSetAttribute and the opt-in limit), and so is what the GPU leaves undefined:
//   a kernel argument that is not device memory (a host or freed pointer), live lanes of a warp at
//   different warp operations, a deadlock at a barrier, wmma's alignment rules, wmma calls that
//   are not the whole warp's with the same arguments (divergent or exited lanes). Such a fault ends
//   the launch; the next cudaGetLastError (and synchronization) returns it, with the details on
//   standard error. (A shuffle from an exited lane gets NaN bits: the GPU's value is undefined.)
// - Device memory is host memory mapped without access outside the emulator's own work (kernels,
//   copies, cuBLAS, NCCL): host code that reads a device pointer dies with SIGSEGV, as on a GPU.
//   Each allocation ends at a page's end with a guard page after it: with
//   TESSERA_CUDA_EMULATOR_PROTECT=0 a kernel reading past an allocation's end faults there.
//   Copies are checked against the allocations they touch, and 2D copies' pitches against the
//   device's maximum (2 GiB - 1 as on A100/H100/H200; TESSERA_CUDA_EMULATOR_MAX_PITCH sets it
//   lower, so that a test reaches the limit with small tensors).
// - Shared memory, dynamic and static, starts each block as NaN bytes (0xff), so a read before a
//   write shows.
// - Kernels, copies and cuBLAS run when they are queued, after the work their stream must wait
//   for (CUDA's stream order: their own stream's, the events it was made to wait for, the legacy
//   default stream's ties to blocking streams). NCCL collectives are queued work that completes
//   only once every rank has reached it (nccl.cpp): cudaEventQuery says "not ready" until then
//   (and at the first check of each collective), and the synchronizations wait for it. From its
//   start (once the work before it is done) to its end, the bytes it will write read as NaN
//   (0xff) and must stay so, and the bytes it reads must not change: work that is not ordered
//   after it (a race on a GPU) reads NaN or is reported when the collective completes.
//   Unlike a GPU, queued work moves on only inside CUDA calls (a host blocked elsewhere, in MPI
//   say, stops it), and every CUDA call must come from one host thread (as in Tessera).
//
// Device code is compiled as C++ from a copy of each .cu file whose launches `k<<<g, b, s, st>>>(a)`
// are rewritten to `launch(k, "k", Config(g, b, s, st))(a)` (translate_cu.cmake).
#pragma once

#include <math.h>  // expf, logf, isnan, INFINITY in the global namespace, as CUDA's headers give them

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- types ----
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaDeviceAttr : int { cudaDevAttrMaxPitch = 11, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute : int { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline constexpr unsigned cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaEventDisableTiming = 2;

struct cudaUUID_t {
  char bytes[16];
};
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  std::size_t sharedMemPerBlockOptin;
  std::size_t memPitch;
  int major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
};

// ---- host API ----
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t err);

cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** ptr, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
// Free: the emulated device's size less its live allocations.
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

namespace tessera::cuda_emulator {
cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);
}
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return tessera::cuda_emulator::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
}

// ---- device code: qualifiers, built-in variables, intrinsics ----
// Device code can tell the emulator's build (the wrappers of kernels/cuda/mma.cuh use it).
#define TESSERA_CUDA_EMULATED_DEVICE 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// __shared__ arrays are rewritten by translate_cu.cmake: static (blocks run one after another, so
// one copy serves them all) and poisoned at each block's start.

extern thread_local uint3 threadIdx, blockIdx;
extern thread_local dim3 blockDim, gridDim;

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }

namespace tessera::cuda_emulator {

// The calling fiber's place: thread index within its block, lane within its warp.
int linear_thread();
inline int lane() { return linear_thread() % 32; }
// A fault in device code: ends the launch (see the header comment); does not return.
[[noreturn]] void fault(const char* what);
// Warp operations. exchange: each lane gives 8 bytes and gets those of lane (lane ^ lane_mask).
void sync_block();
void sync_warp(unsigned mask, const char* what);
std::uint64_t exchange(unsigned mask, std::uint64_t bits, int lane_mask);
// A call every lane of the warp must make, in the same order and with the same `arguments` (a
// wmma operation): checked without synchronizing the lanes (the first lane's call is the
// reference); a lane that makes it differently faults, and the block's end checks that every
// lane of the warp made as many.
void uniform_warp_call(const char* op, std::uint64_t arguments);
// A gather every lane of the warp must make (mma.sync, ldmatrix): each lane gives `bytes` bytes at
// `mine` and gets all 32 lanes' at `all` (lane i's at all + i * bytes).
void warp_gather(const char* op, const void* mine, std::size_t bytes, void* all);
// Whether [p, p + bytes) lies in the current block's dynamic shared memory.
bool is_shared_memory(const void* p, std::size_t bytes);
// cp.async.cg.shared.global of `bytes` (16) bytes, zeros past `src_bytes`: the destination reads
// as NaN bytes (0xff) until cp_async_wait completes its group (checked: alignment, shared
// destination, device-memory source). cp_async_commit closes the calling thread's group;
// cp_async_wait(n) completes all but its n newest groups.
void cp_async(void* shared_dst, const void* global_src, std::size_t bytes, std::size_t src_bytes);
void cp_async_commit();
void cp_async_wait(int pending);
// The current block's dynamic shared memory (extern __shared__ arrays).
unsigned char* dynamic_shared();
// A static __shared__ array: filled with 0xff bytes by the first thread of each block to reach it.
void poison_static_shared(void* array, std::size_t bytes);

}  // namespace tessera::cuda_emulator

inline void __syncthreads() { tessera::cuda_emulator::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { tessera::cuda_emulator::sync_warp(mask, "__syncwarp"); }

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move up to 8 bytes");
  if (width != 32) tessera::cuda_emulator::fault("__shfl_xor_sync: the emulator has only width 32");
  std::uint64_t bits = 0;
  __builtin_memcpy(&bits, &value, sizeof(T));
  bits = tessera::cuda_emulator::exchange(mask, bits, lane_mask);
  T out;
  __builtin_memcpy(&out, &bits, sizeof(T));
  return out;
}

// Blocks run one at a time and a block's fibers switch only at barriers: a plain add is atomic.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// ---- launches ----
namespace tessera::cuda_emulator {

struct Config {
  dim3 grid, block;
  std::size_t shared_bytes;
  cudaStream_t stream;
  Config(dim3 g, dim3 b, std::size_t s = 0, cudaStream_t st = nullptr)
      : grid(g), block(b), shared_bytes(s), stream(st) {}
};

// Runs one thread's body for every thread of every block (after checking the configuration);
// a failure is kept for cudaGetLastError. `pointers` are the kernel's pointer arguments, each of
// which must be null or device memory.
class ThreadBody {
 public:
  virtual void run() = 0;

 protected:
  ~ThreadBody() = default;
};
void run_grid(const void* kernel, const char* name, const Config& config, const void* const* pointers,
              std::size_t count, ThreadBody& body);

template <typename T>
const void* pointer_or_null(const T& value) {
  if constexpr (std::is_pointer_v<T>)
    return static_cast<const void*>(value);
  else
    return nullptr;
}

// A launch: `call` calls the kernel with one thread's copy of the arguments, so that a kernel
// template's arguments are deduced from them as in a CUDA launch. `kernel` is the kernel's address
// where the launch names it with its template arguments (or null): the key of its
// cudaFuncSetAttribute (without one, the default 48 KB of dynamic shared memory).
template <typename Call>
class Launch {
 public:
  Launch(const void* kernel, const char* name, Call call, Config config)
      : kernel_(kernel), name_(name), call_(call), config_(config) {}

  template <typename... A>
  void operator()(A&&... args) const {
    struct Body final : ThreadBody {
      Call call;
      std::tuple<std::decay_t<A>...> params;
      Body(Call c, A&&... a) : call(c), params(std::forward<A>(a)...) {}
      void run() override {
        std::tuple<std::decay_t<A>...> mine = params;  // each thread its own copy, as kernel parameters
        std::apply(call, mine);
      }
    } body(call_, std::forward<A>(args)...);
    const void* pointers[sizeof...(A) + 1] = {nullptr};
    std::size_t count = 0;
    std::apply([&](const auto&... p) { ((pointers[count++] = pointer_or_null(p)), ...); }, body.params);
    run_grid(kernel_, name_, config_, pointers, count, body);
  }

 private:
  const void* kernel_;
  const char* name_;
  Call call_;
  Config config_;
};

template <typename Kernel, typename Call>
Launch<Call> launch(Kernel kernel, const char* name, Call call, Config config) {
  if constexpr (std::is_pointer_v<Kernel>)
    return Launch<Call>(reinterpret_cast<const void*>(kernel), name, call, config);
  else
    return Launch<Call>(nullptr, name, call, config);
}

// For the emulator's other parts (cuBLAS, NCCL): device memory is accessible while one lives.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};
// Work queued on a stream that completes later than it is queued (the emulated NCCL's
// collectives). start() is called once the work it waits for (see the comment at the top) is
// done; finish(wait) says whether it is done, with `wait` once it is, and writes its results.
class StreamWork {
 public:
  virtual ~StreamWork() = default;
  virtual void start() = 0;
  virtual bool finish(bool wait) = 0;
};
struct Queued;  // a piece of queued work
// Queues `work` on `stream`, in stream order and, if given, after `also_after` too.
std::shared_ptr<Queued> enqueue(cudaStream_t stream, std::unique_ptr<StreamWork> work,
                                const std::shared_ptr<Queued>& also_after = nullptr);
// Until `work` (and what it waits for) is done; nothing for null.
void wait_for(const std::shared_ptr<Queued>& work);
// Before work queued on `stream` runs (a kernel, a copy, cuBLAS): what it must wait for, done.
void wait_before_work(cudaStream_t stream);
// A failure of queued work: printed, and returned by the next synchronization or
// cudaGetLastError (as a kernel's fault).
void report_failure(cudaError_t err, const char* what);

// Whether [p, p + bytes) lies in one live cudaMalloc allocation; whether p lies in the range
// device memory is handed out from (live, freed or a guard page).
bool is_device_memory(const void* p, std::size_t bytes);
bool in_device_range(const void* p);

}  // namespace tessera::cuda_emulator
