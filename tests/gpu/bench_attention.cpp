// Flash attention throughput on the GPU, FlashAttention's convention: batch x length = 16k
// tokens, d_model 2048 (heads = 2048 / d), bfloat16; forward FLOPs 4 b s^2 h d (halved when
// causal), backward 2.5x the forward. Prints CSV rows:
//   d,causal,seqlen,batch,heads,fwd_ms,fwd_bwd_ms,fwd_tflops,fwd_bwd_tflops
// tests/gpu/sdpa_reference.py prints the same rows for PyTorch's scaled_dot_product_attention.
// Then, as '#' lines, cuBLAS bfloat16 GEMM TFLOP/s on the big model's shapes and the memory used.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <tuple>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"

using namespace tessera;

namespace {

Tensor random_bf16(const Shape& shape, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return Tensor::from(v, shape).to(DType::bf16).to(Device::cuda);
}

// A failed CUDA call ends the benchmark with its error: a kernel fault must not print a time.
void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::printf("# error: %s: %s\n", what, cudaGetErrorString(err));
  std::fflush(stdout);
  std::exit(1);
}

// Warm up for 100 ms (clocks up, shared-memory attributes set, the allocator's cache filled),
// then time enough calls for about 60 ms (3 to 100) between two events. sdpa_reference.py
// times PyTorch the same way.
template <typename Fn>
double time_ms(Fn&& fn) {
  fn();
  check(cudaDeviceSynchronize(), "warm-up");
  const auto warm_start = std::chrono::steady_clock::now();
  int calls = 0;
  double warm_ms = 0;
  while (warm_ms < 100.0 || calls < 3) {
    fn();
    ++calls;
    check(cudaDeviceSynchronize(), "warm-up");
    warm_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start).count();
  }
  const int repeats = std::clamp(static_cast<int>(60.0 / (warm_ms / calls)) + 1, 3, 100);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start), "cudaEventRecord");
  for (int i = 0; i < repeats; ++i) fn();
  check(cudaEventRecord(stop), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "the timed calls");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / repeats;
}

}  // namespace

int main() {
  if (!cuda_available()) {
    std::printf("no GPU on this machine: attention benchmark not run\n");
    return 0;
  }
  std::printf("d,causal,seqlen,batch,heads,fwd_ms,fwd_bwd_ms,fwd_tflops,fwd_bwd_tflops\n");
  // Every shape below holds batch x length = 16k tokens of d_model 2048: the inputs are drawn once
  // (on the host: seconds each) and viewed in each shape.
  const std::int64_t elements = std::int64_t{16384} * 2048;
  const Tensor q_all = random_bf16({elements}, 1), k_all = random_bf16({elements}, 2),
               v_all = random_bf16({elements}, 3), dout_all = random_bf16({elements}, 4);
  for (std::int64_t d : {64, 128}) {
    for (bool causal : {false, true}) {
      for (std::int64_t s : {512, 1024, 2048, 4096}) {
        const std::int64_t b = 16384 / s, h = 2048 / d;
        const Tensor q = q_all.reshape({b, h, s, d}), k = k_all.reshape({b, h, s, d}), v = v_all.reshape({b, h, s, d}),
                     dout = dout_all.reshape({b, h, s, d});
        const kernels::AttentionOptions opt{.causal = causal};
        kernels::AttentionOutput fwd;
        const double fwd_ms = time_ms([&] { fwd = cuda::attention_forward(q, k, v, Tensor(), opt); });
        const double both_ms = time_ms([&] {
          fwd = cuda::attention_forward(q, k, v, Tensor(), opt);
          cuda::attention_backward(dout, q, k, v, Tensor(), fwd, opt);
        });
        const double flops = 4.0 * static_cast<double>(b * s * s * h * d) / (causal ? 2.0 : 1.0);
        std::printf("%lld,%d,%lld,%lld,%lld,%.3f,%.3f,%.1f,%.1f\n", static_cast<long long>(d), causal ? 1 : 0,
                    static_cast<long long>(s), static_cast<long long>(b), static_cast<long long>(h), fwd_ms, both_ms,
                    flops / (fwd_ms * 1e9), 3.5 * flops / (both_ms * 1e9));
        std::fflush(stdout);
      }
    }
  }
  // The ceiling for the model's GEMMs: cuBLAS in bfloat16 on the big model's forward shapes (24576
  // tokens, about the paper's 25k a batch; weights [out, in]; the check's 32k vocabulary), so a
  // training MFU can be read against what the GEMMs alone reach.
  const std::int64_t tokens = 24576;
  for (const auto& [out_f, in_f, what] : {std::tuple<std::int64_t, std::int64_t, const char*>{4096, 1024, "FFN in"},
                                          {1024, 4096, "FFN out"},
                                          {1024, 1024, "attention projection"},
                                          {32000, 1024, "output layer, vocabulary 32k"}}) {
    const Tensor x = random_bf16({tokens, in_f}, 5), w = random_bf16({out_f, in_f}, 6);
    const double ms = time_ms([&] { (void)cuda::matmul(x, w, false, true); });
    std::printf("# cuBLAS bf16 GEMM %lldx%lldx%lld (%s): %.3f ms, %.1f TFLOP/s\n", static_cast<long long>(tokens),
                static_cast<long long>(out_f), static_cast<long long>(in_f), what, ms,
                2.0 * static_cast<double>(tokens * out_f * in_f) / (ms * 1e9));
    std::fflush(stdout);
  }
  const MemoryStats mem = device_memory_stats();
  std::printf("# device memory: peak in use %.1f MiB, reserved %.1f MiB, cudaMalloc calls %zu\n",
              static_cast<double>(mem.peak_in_use) / (1 << 20), static_cast<double>(mem.reserved()) / (1 << 20),
              mem.system_allocations);
  return 0;
}
