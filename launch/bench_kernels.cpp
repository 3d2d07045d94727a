#include "launch/bench_kernels.h"

#include <cblas.h>
#include <fmt/core.h>
#include <omp.h>

#include <chrono>
#include <cstring>
#include <random>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layer_norm.h"

namespace tessera::launch {
namespace {

// Best wall time of `repeats` runs after one warm-up (best-of filters out a noisy neighbour).
template <typename Fn>
double best_seconds(int repeats, Fn&& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = n(rng);
  return t;
}

}  // namespace

int run_kernel_bench(const BenchOptions& opt) {
  fmt::print("tessera bench kernels: {} OpenMP threads; {}\n", omp_get_max_threads(), cpu::blas_description());
  fmt::print("({}; figures are best of {} runs)\n\n", openblas_get_config(), opt.repeats);

  // Reference 1: BLAS sgemm rate on a large square problem.
  const std::int64_t n = 1024;
  Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2);
  const double t_sgemm = best_seconds(opt.repeats, [&] { (void)cpu::matmul(a, b); });
  const double sgemm = 2.0 * n * n * n / t_sgemm / 1e9;
  fmt::print("{:<52} {:>9.1f} GFLOP/s  (reference)\n", "sgemm 1024x1024x1024", sgemm);

  // GEMM at Transformer shapes: [tokens, d_model] x [d_model, d_ff], batched head GEMMs.
  {
    Tensor x = random_tensor({4096, 512}, 3), w = random_tensor({2048, 512}, 4);
    const double t = best_seconds(opt.repeats, [&] { (void)cpu::matmul(x, w, false, true); });
    const double gf = 2.0 * 4096 * 512 * 2048 / t / 1e9;
    fmt::print("{:<52} {:>9.1f} GFLOP/s  {:5.1f}% of sgemm\n", "matmul [4096,512] x [2048,512]^T (FFN)", gf,
               100 * gf / sgemm);
    Tensor q = random_tensor({256, 128, 64}, 5), k = random_tensor({256, 128, 64}, 6);
    const double t2 = best_seconds(opt.repeats, [&] { (void)cpu::matmul(q, k, false, true); });
    const double gf2 = 2.0 * 256 * 128 * 128 * 64 / t2 / 1e9;
    fmt::print("{:<52} {:>9.1f} GFLOP/s  {:5.1f}% of sgemm\n", "batched matmul 256 x [128,64] x [128,64]^T", gf2,
               100 * gf2 / sgemm);
  }

  // Attention forward + backward: FlashAttention's FLOP convention (forward 4*b*s^2*h*d,
  // backward 2.5x forward; halved under the causal mask).
  int status = 0;
  for (bool causal : {false, true}) {
    const std::int64_t B = 32, H = 8, L = 128, D = 64;
    Tensor q = random_tensor({B, H, L, D}, 7), k = random_tensor({B, H, L, D}, 8), v = random_tensor({B, H, L, D}, 9);
    Tensor dout = random_tensor({B, H, L, D}, 10);
    const cpu::AttentionOptions o{.causal = causal, .scale = 0.0};
    const double t_fwd = best_seconds(opt.repeats, [&] { (void)cpu::attention_forward(q, k, v, Tensor(), o); });
    const cpu::AttentionOutput f = cpu::attention_forward(q, k, v, Tensor(), o);
    const double t_bwd =
        best_seconds(opt.repeats, [&] { (void)cpu::attention_backward(dout, q, k, v, Tensor(), f, o); });
    const double fwd_flops = 4.0 * B * L * L * H * D * (causal ? 0.5 : 1.0);
    const double gf = 3.5 * fwd_flops / (t_fwd + t_bwd) / 1e9;
    const double ratio = gf / sgemm;
    fmt::print("{:<52} {:>9.1f} GFLOP/s  {:5.1f}% of sgemm (fwd {:.1f} ms, bwd {:.1f} ms){}\n",
               fmt::format("attention fwd+bwd b=32 h=8 L=128 d=64{}", causal ? " causal" : ""), gf, 100 * ratio,
               1e3 * t_fwd, 1e3 * t_bwd,
               causal ? "" : (ratio >= 0.30 ? "  target >=30%: met" : "  target >=30%: MISSED"));
  }

  // Reference 2: memory bandwidth of a copy (bytes read + bytes written) of the size the kernels
  // below stream (16k tokens of d_model 512, float32): another size would set cache against memory
  // (a 256 MiB copy made a 32 MiB layer norm look 2x faster than copying).
  const std::int64_t rows = 32 * 128 * 4, d = 512;
  const std::size_t bytes = static_cast<std::size_t>(rows * d) * sizeof(float);
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double t_copy = best_seconds(opt.repeats, [&] {
    const std::int64_t chunks = 64;
    const std::size_t cb = bytes / chunks;
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < chunks; ++c) std::memcpy(dst.data() + c * cb, src.data() + c * cb, cb);
  });
  const double copy_gbs = 2.0 * static_cast<double>(bytes) / t_copy / 1e9;
  fmt::print("\n{:<52} {:>9.1f} GB/s     (reference)\n", fmt::format("copy {} MiB (read + write)", bytes >> 20),
             copy_gbs);

  {
    Tensor x = random_tensor({rows, d}, 11), g = random_tensor({d}, 12), bb = random_tensor({d}, 13);
    const double t_fwd = best_seconds(opt.repeats, [&] { (void)cpu::layer_norm_forward(x, g, bb, 1e-5); });
    const double gbs = 2.0 * static_cast<double>(x.nbytes()) / t_fwd / 1e9;  // read x, write y
    fmt::print("{:<52} {:>9.1f} GB/s     {:5.1f}% of copy{}\n", "layer norm forward [16384, 512]", gbs,
               100 * gbs / copy_gbs, gbs / copy_gbs >= 0.5 ? "  target >=50%: met" : "  target >=50%: MISSED");
    const cpu::LayerNormOutput f = cpu::layer_norm_forward(x, g, bb, 1e-5);
    Tensor dy = random_tensor({rows, d}, 14);
    const double t_bwd = best_seconds(opt.repeats, [&] { (void)cpu::layer_norm_backward(dy, x, g, f.mean, f.rstd); });
    const double gbs_b = 3.0 * static_cast<double>(x.nbytes()) / t_bwd / 1e9;  // read x, dy; write dx
    fmt::print("{:<52} {:>9.1f} GB/s     {:5.1f}% of copy\n", "layer norm backward [16384, 512]", gbs_b,
               100 * gbs_b / copy_gbs);
    // Dropout draws a Philox block per 4 elements (the same numbers as the GPU's): compute, not
    // memory, unless the generator is vectorized.
    const double t_drop = best_seconds(opt.repeats, [&] { (void)cpu::dropout_forward(x, 0.1, 7, 0); });
    const double gbs_d = 2.0 * static_cast<double>(x.nbytes()) / t_drop / 1e9;  // read x, write y
    fmt::print("{:<52} {:>9.1f} GB/s     {:5.1f}% of copy\n", "dropout forward [16384, 512]", gbs_d,
               100 * gbs_d / copy_gbs);
    // The optimizer step over 8M parameters: memory-bound (read w, g, m, v; write w, m, v).
    Tensor w = random_tensor({rows, d}, 15), m = random_tensor({rows, d}, 16), v = random_tensor({rows, d}, 17);
    float* second = v.data<float>();
    for (std::int64_t i = 0; i < v.numel(); ++i) second[i] *= second[i];  // a second moment is not negative
    const cpu::AdamHyper<float> h{0.9f, 0.98f, 1e-4f, 1.0f, 1e-9f};
    const double t_adam = best_seconds(opt.repeats, [&] {
      cpu::adam_update(w.data<float>(), dy.data<float>(), m.data<float>(), v.data<float>(), w.numel(), h);
    });
    const double gbs_a = 7.0 * static_cast<double>(x.nbytes()) / t_adam / 1e9;
    fmt::print("{:<52} {:>9.1f} GB/s     {:5.1f}% of copy\n", "Adam update of [16384, 512] parameters", gbs_a,
               100 * gbs_a / copy_gbs);
  }
  return status;
}

}  // namespace tessera::launch
