// Each hot CUDA kernel timed on the big model's shapes, with its bytes and FLOPs from the cost
// model (kernels/cost.h), so that tests/gpu/check_report.py can print achieved GB/s, TFLOP/s and
// the roofline fraction. Prints CSV rows:
//   kernel,dtype,shape,ms,bytes,flops,peak
// `peak` names the compute peak that applies: tensor (bf16 tensor cores) or fp32 (CUDA cores).
// `--small` runs tiny shapes (CI runs it on the CUDA emulator, so that the GPU check's one run
// does not find a broken call).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "kernels/cost.h"
#include "kernels/dispatch.h"

using namespace tessera;
namespace cost = kernels::cost;

namespace {

// A failed CUDA call ends the benchmark with its error: a kernel fault must not print a time.
void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::printf("# error: %s: %s\n", what, cudaGetErrorString(err));
  std::fflush(stdout);
  std::exit(1);
}

// 3 warm-up calls, then enough calls for about 20 ms (3 to 200) between two events: the mean.
double time_ms(const std::function<void()>& fn) {
  const auto start_warm = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  const double warm_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_warm).count() / 3;
  const int repeats = std::clamp(static_cast<int>(20.0 / std::max(warm_ms, 1e-3)) + 1, 3, 200);
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

void row(const char* kernel, const char* dtype, const std::string& shape, const cost::Cost& c, const char* peak,
         const std::function<void()>& fn) {
  const double ms = time_ms(fn);
  std::printf("%s,%s,%s,%.6f,%.0f,%.0f,%s\n", kernel, dtype, shape.c_str(), ms, c.bytes, c.flops, peak);
  std::fflush(stdout);
}

// On the host for int32 (token ids: the GPU's `full` is for floating types).
Tensor filled(const Shape& shape, double value, DType dtype = DType::bf16) {
  if (dtype == DType::i32) return Tensor::full(shape, value, dtype).to(Device::cuda);
  return kernels::full(shape, value, dtype, Device::cuda);
}

// The shapes: the big model's (d_model 1024, d_ff 4096, 32k vocabulary, 16k tokens), or tiny ones.
struct Sizes {
  std::int64_t tokens = 16384, d_model = 1024, d_ff = 4096, vocab = 32000, ce_rows = 8192;
  std::int64_t attention_batch = 16, attention_length = 1024, adam = std::int64_t{1} << 25;
};
constexpr Sizes kSmall{.tokens = 64,
                       .d_model = 32,
                       .d_ff = 64,
                       .vocab = 100,
                       .ce_rows = 16,
                       .attention_batch = 1,
                       .attention_length = 64,
                       .adam = 1000};

std::string dims(std::initializer_list<std::int64_t> sizes) {
  std::string out;
  for (auto n : sizes) {
    if (!out.empty()) out.push_back('x');
    out.append(std::to_string(n));
  }
  return out;
}

// Layer norm, cross entropy, dropout, embedding, a GEMM, an add: the training step's other kernels.
void bench_row_kernels(const Sizes& z) {
  const std::int64_t tokens = z.tokens, d_model = z.d_model, d_ff = z.d_ff, vocab = z.vocab, ce_rows = z.ce_rows;
  const Tensor x = filled({tokens, d_model}, 0.5), gamma = filled({d_model}, 1.0, DType::f32),
               beta = filled({d_model}, 0.0, DType::f32);
  const auto ln = kernels::layer_norm_forward(x, gamma, beta, 1e-5);
  row("layer_norm_forward", "bf16", dims({tokens, d_model}), cost::layer_norm_forward(tokens, d_model, 2), "fp32",
      [&] { (void)kernels::layer_norm_forward(x, gamma, beta, 1e-5); });
  row("layer_norm_backward", "bf16", dims({tokens, d_model}), cost::layer_norm_backward(tokens, d_model, 2), "fp32",
      [&] { (void)kernels::layer_norm_backward(x, x, gamma, ln.mean, ln.rstd); });
  const Tensor logits = filled({ce_rows, vocab}, 0.1), targets = filled({ce_rows}, 7, DType::i32);
  row("cross_entropy_with_grad", "bf16", dims({ce_rows, vocab}), cost::cross_entropy_with_grad(ce_rows, vocab, 2),
      "fp32", [&] { (void)kernels::cross_entropy_with_grad(logits, targets, 0.1, -1); });
  const Tensor h = filled({tokens, d_ff}, 0.5);
  row("dropout_forward", "bf16", dims({tokens, d_ff}), cost::dropout_forward(tokens * d_ff, 2), "fp32",
      [&] { (void)kernels::dropout_forward(h, 0.1, 1, 0); });
  row("binary_add", "bf16", dims({tokens, d_ff}), cost::binary(tokens * d_ff, 2), "fp32",
      [&] { (void)kernels::add(h, h); });
  row("softmax_lastdim", "bf16", dims({tokens, d_ff}), cost::softmax_lastdim(tokens, d_ff, 2), "fp32",
      [&] { (void)kernels::softmax_lastdim(h); });
  const Tensor table = filled({vocab, d_model}, 0.5, DType::f32), ids = filled({tokens}, 11, DType::i32);
  row("embedding_forward", "f32", dims({tokens, d_model}), cost::embedding_forward(tokens, d_model, 4), "fp32",
      [&] { (void)kernels::embedding_forward(table, ids); });
  const Tensor w = filled({d_ff, d_model}, 0.01);
  row("matmul", "bf16", dims({tokens, d_ff, d_model}), cost::matmul(tokens, d_ff, d_model, 2), "tensor",
      [&] { (void)kernels::matmul(x, w, false, true); });
}

// Attention forward and backward at d 64 and 128 (16k tokens, d_model 2048, length 1024).
void bench_attention(const Sizes& z) {
  for (std::int64_t d : {64, 128}) {
    const std::int64_t b = z.attention_batch, s = z.attention_length, heads = 2048 / d;
    const Tensor q = filled({b, heads, s, d}, 0.1), dout = filled({b, heads, s, d}, 0.01);
    const kernels::AttentionOptions opt{.causal = false};
    const cost::AttentionShape shape{.batch = b, .heads = heads, .lq = s, .lk = s, .d = d, .causal = false};
    const std::string name = dims({b, heads, s, d});
    const auto fwd = kernels::attention_forward(q, q, q, Tensor(), opt);
    row("attention_forward", "bf16", name, cost::attention_forward(shape, 2), "tensor",
        [&] { (void)kernels::attention_forward(q, q, q, Tensor(), opt); });
    row("attention_backward", "bf16", name, cost::attention_backward(shape, 2), "tensor",
        [&] { (void)kernels::attention_backward(dout, q, q, q, Tensor(), fwd, opt); });
  }
}

// Fused Adam over 32M float32 parameters in one tensor, with the bf16 copy.
void bench_adam(const Sizes& z) {
  const std::int64_t n = z.adam;
  kernels::AdamParam p{filled({n}, 0.5, DType::f32), filled({n}, 0.01, DType::f32), filled({n}, 0.0, DType::f32),
                       filled({n}, 0.0, DType::f32), filled({n}, 0.5)};
  const kernels::AdamStep step{.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9, .t = 1};
  row("adam_update", "f32", dims({n}), cost::adam_update(n, true), "fp32", [&] { kernels::adam_update({p}, step); });
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_available()) {
    std::printf("# no GPU on this machine: kernel benchmark not run\n");
    return 0;
  }
  const Sizes sizes = argc > 1 && std::string(argv[1]) == "--small" ? kSmall : Sizes{};
  std::printf("kernel,dtype,shape,ms,bytes,flops,peak\n");
  bench_row_kernels(sizes);
  bench_attention(sizes);
  bench_adam(sizes);
  return 0;
}
