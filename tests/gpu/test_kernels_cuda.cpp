// Every CUDA kernel against its CPU twin on random shapes (ragged lengths and masks included).
// Tolerances, |gpu - cpu| <= tol * (1 + |cpu|) per element:
//   float32: 1e-4 (GEMM with TF32 off; attention, layer norm, cross entropy: float32 throughout)
//   bfloat16 storage: 2e-2 (one bfloat16 rounding of the result is 2^-8 relative; attention also
//   rounds P to bfloat16 before P V, as FlashAttention does)
//   Adam: bit-identical (no fused multiply-add on the GPU side).
// The CPU twin of a bfloat16 case runs in float32 on the same bfloat16-rounded inputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <tuple>

#include "gpu_test_util.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/layout.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/adam.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/layout.h"
#include "kernels/cuda/reduce.h"
#include "kernels/dispatch.h"

namespace tessera {
namespace {

TEST(CudaKernels, ElementwiseMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor a = as_input(random({7, 33, 65}, 1), dt), b = as_input(random({7, 33, 65}, 2, 0.5, 2.0), dt);
    const Tensor bias = as_input(random({65}, 3), dt);
    const std::string l = dtype_label(dt);
    for (auto op : {cpu::BinaryOp::add, cpu::BinaryOp::sub, cpu::BinaryOp::mul, cpu::BinaryOp::div})
      expect_close(cuda::binary(op, to_gpu(a, dt), to_gpu(b, dt)), cpu::binary(op, a, b), tol_of(dt), l + " binary");
    expect_close(cuda::binary(cpu::BinaryOp::add, to_gpu(a, dt), to_gpu(bias, dt)), cpu::add(a, bias), tol_of(dt),
                 l + " bias add");
    expect_close(cuda::unary(cpu::UnaryOp::relu, to_gpu(a, dt)), cpu::unary(cpu::UnaryOp::relu, a), tol_of(dt),
                 l + " relu");
    expect_close(cuda::unary(cpu::UnaryOp::exp, to_gpu(a, dt)), cpu::unary(cpu::UnaryOp::exp, a), tol_of(dt),
                 l + " exp");
    expect_close(cuda::unary(cpu::UnaryOp::neg, to_gpu(a, dt)), cpu::unary(cpu::UnaryOp::neg, a), tol_of(dt),
                 l + " neg");
    expect_close(cuda::unary(cpu::UnaryOp::log, to_gpu(b, dt)), cpu::unary(cpu::UnaryOp::log, b), tol_of(dt),
                 l + " log");
    expect_close(cuda::unary(cpu::UnaryOp::tanh, to_gpu(a, dt)), cpu::unary(cpu::UnaryOp::tanh, a), tol_of(dt),
                 l + " tanh");
    expect_close(cuda::affine(to_gpu(a, dt), 0.5, -2.0), cpu::affine(a, 0.5, -2.0), tol_of(dt), l + " affine");
    expect_close(cuda::relu_backward(to_gpu(b, dt), to_gpu(a, dt)), cpu::relu_backward(b, a), tol_of(dt),
                 l + " relu_backward");
    expect_close(cuda::sum_to_last_dim(to_gpu(a, dt)), cpu::sum_to_shape(a, {65}), tol_of(dt), l + " bias grad");
  }
  // Through the dispatcher, shapes as on the CPU: b with more leading ones than a gives them to the result.
  const Tensor row = random({65}, 6), row2 = random({1, 1, 65}, 7);
  const Tensor sum = kernels::binary(cpu::BinaryOp::add, row.to(Device::cuda), row2.to(Device::cuda));
  EXPECT_EQ(sum.shape(), (Shape{1, 1, 65}));
  expect_close(sum, cpu::binary(cpu::BinaryOp::add, row, row2), kF32Tol, "broadcast shape");
  const Tensor x = random({1000}, 4), y = random({1000}, 5);
  Tensor gx = x.to(Device::cuda), cx = x.clone();
  cuda::add_inplace(gx, y.to(Device::cuda), 0.25);
  cpu::add_inplace(cx, y, 0.25);
  expect_close(gx, cx, kF32Tol, "add_inplace");
  // Casts round to nearest even exactly as the host's bfloat16 conversion.
  const Tensor r = random({4097}, 6, -100, 100);
  const Tensor host_bf16 = r.to(DType::bf16).to(DType::f32);
  expect_close(cuda::cast(r.to(Device::cuda), DType::bf16), host_bf16, 0.0, "cast to bf16");
  expect_close(cuda::cast(r.to(DType::bf16).to(Device::cuda), DType::f32), host_bf16, 0.0, "cast to fp32");
}

// NaN and -inf where the CPU twins have them: ReLU keeps a NaN; a row of -inf logits has
// log-sum-exp -inf and log-softmax NaN.
TEST(CudaKernels, ReluNaNAndMinusInfinityRowsMatchCpu) {
  SKIP_WITHOUT_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from(std::vector<float>{nan, -0.0f, -2.0f, 3.0f}, {4});
  const Tensor z = Tensor::from(std::vector<float>{-inf, -inf, -inf, 1, 2, 3}, {2, 3});
  for (DType dt : {DType::f32, DType::bf16}) {
    const auto gpu_relu = cuda::unary(cpu::UnaryOp::relu, to_gpu(x, dt)).to(Device::cpu).to_doubles();
    const auto cpu_relu = cpu::unary(cpu::UnaryOp::relu, x).to_doubles();
    EXPECT_TRUE(std::isnan(gpu_relu[0])) << dtype_label(dt);
    for (int i = 1; i < 4; ++i) EXPECT_EQ(gpu_relu[i], cpu_relu[i]) << dtype_label(dt) << " relu " << i;
    const auto gpu_ls = cuda::log_softmax_lastdim(to_gpu(z, dt)).to(Device::cpu).to_doubles();
    for (int j = 0; j < 3; ++j) EXPECT_TRUE(std::isnan(gpu_ls[j])) << dtype_label(dt) << " log_softmax " << j;
  }
  const Tensor targets = Tensor::from(std::vector<std::int32_t>{0, 2}, {2});
  const auto gpu_lse = cuda::cross_entropy_forward(z.to(Device::cuda), targets.to(Device::cuda), 0.0, -100)
                           .lse.to(Device::cpu)
                           .to_doubles();
  const auto cpu_lse = cpu::cross_entropy_forward(z, targets, 0.0, -100).lse.to_doubles();
  EXPECT_EQ(gpu_lse[0], -inf);
  EXPECT_EQ(cpu_lse[0], -inf);
  EXPECT_NEAR(gpu_lse[1], cpu_lse[1], 1e-5);
  // Masked classes (-inf logits) without smoothing: the loss is the NLL, not 0 * inf = NaN.
  const Tensor masked = Tensor::from(std::vector<float>{1, -inf, 2, 0, 0, -inf, -inf, 0}, {2, 4});
  const Tensor masked_targets = Tensor::from(std::vector<std::int32_t>{0, 3}, {2});
  expect_close(cuda::cross_entropy_forward(masked.to(Device::cuda), masked_targets.to(Device::cuda), 0.0, -100).loss,
               cpu::cross_entropy_forward(masked, masked_targets, 0.0, -100).loss, kF32Tol, "masked cross entropy");
  // Logits near float's limit: a plain float sum of them overflows; the loss is still ln 3.
  const Tensor huge = Tensor::from(std::vector<float>{3e38f, 3e38f, 3e38f}, {1, 3});
  const Tensor target0 = Tensor::from(std::vector<std::int32_t>{0}, {1});
  for (double eps : {0.0, 0.1}) {
    const Tensor gpu_loss =
        cuda::cross_entropy_forward(huge.to(Device::cuda), target0.to(Device::cuda), eps, -100).loss;
    EXPECT_NEAR(gpu_loss.to(Device::cpu).item(), std::log(3.0), 1e-5) << "huge logits, eps " << eps;
    expect_close(gpu_loss, cpu::cross_entropy_forward(huge, target0, eps, -100).loss, kF32Tol, "huge logits");
  }
}

TEST(CudaKernels, ReductionsSoftmaxAndPermuteMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string l = dtype_label(dt);
    const Tensor x = as_input(random({5, 7, 300}, 70, -4, 4), dt), dy = as_input(random({5, 7, 300}, 71), dt);
    const Tensor big = as_input(random({1000003}, 72), dt);  // more blocks than partial sums
    // The bfloat16 result is one bfloat16 rounding of the float32 sum.
    expect_close(cuda::sum_all(to_gpu(big, dt)), cpu::sum_all(big), tol_of(dt), l + " sum_all");
    expect_close(cuda::mean_all(to_gpu(x, dt)), cpu::mean_all(x), tol_of(dt), l + " mean_all");
    for (std::int64_t dim : {0, 1, -1})
      for (bool keep : {false, true}) {
        const std::string w = l + " dim " + std::to_string(dim) + (keep ? " keepdim" : "");
        expect_close(cuda::sum_dim(to_gpu(x, dt), dim, keep), cpu::sum_dim(x, dim, keep), tol_of(dt), w + " sum");
        expect_close(cuda::mean_dim(to_gpu(x, dt), dim, keep), cpu::mean_dim(x, dim, keep), tol_of(dt), w + " mean");
      }
    const Tensor ys = cpu::softmax_lastdim(x), yl = cpu::log_softmax_lastdim(x);
    const Tensor gys = cuda::softmax_lastdim(to_gpu(x, dt)), gyl = cuda::log_softmax_lastdim(to_gpu(x, dt));
    expect_close(gys, ys, tol_of(dt), l + " softmax");
    expect_close(gyl, yl, tol_of(dt), l + " log_softmax");
    // Backward from the same (CPU-rounded) forward output on both sides.
    const Tensor ys_in = as_input(ys, dt), yl_in = as_input(yl, dt);
    expect_close(cuda::softmax_backward(to_gpu(dy, dt), to_gpu(ys_in, dt)), cpu::softmax_backward(dy, ys_in),
                 tol_of(dt), l + " softmax backward");
    expect_close(cuda::log_softmax_backward(to_gpu(dy, dt), to_gpu(yl_in, dt)), cpu::log_softmax_backward(dy, yl_in),
                 tol_of(dt), l + " log_softmax backward");
    const Tensor heads = as_input(random({2, 9, 4, 16}, 73), dt);
    for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{0, 2, 1, 3}, {3, 1, 0, 2}, {0, 1, 2, 3}})
      expect_close(cuda::permute(to_gpu(heads, dt), dims), cpu::permute(heads, dims), 0.0, l + " permute");
  }
}

TEST(CudaKernels, LayerNormMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 8}, {37, 512}, {300, 1024}, {5, 4100}}) {
      const Tensor x = as_input(random({rows, cols}, 10, -3, 3), dt), dy = as_input(random({rows, cols}, 11), dt);
      const Tensor gamma = random({cols}, 12, 0.5, 1.5), beta = random({cols}, 13);
      const auto c = cpu::layer_norm_forward(x, gamma, beta, 1e-5);
      const auto g = cuda::layer_norm_forward(to_gpu(x, dt), gamma.to(Device::cuda), beta.to(Device::cuda), 1e-5);
      const std::string l = dtype_label(dt) + " layer norm " + std::to_string(rows) + "x" + std::to_string(cols);
      expect_close(g.y, c.y, tol_of(dt), l + " y");
      expect_close(g.mean, c.mean, kF32Tol, l + " mean");
      expect_close(g.rstd, c.rstd, kF32Tol, l + " rstd");
      const auto cg = cpu::layer_norm_backward(dy, x, gamma, c.mean, c.rstd);
      const auto gg = cuda::layer_norm_backward(to_gpu(dy, dt), to_gpu(x, dt), gamma.to(Device::cuda), g.mean, g.rstd);
      expect_close(gg.dx, cg.dx, tol_of(dt), l + " dx");
      // float32 sums over the rows on both sides; bfloat16 cases: of the same rounded inputs.
      expect_close(gg.dgamma, cg.dgamma, kF32Tol, l + " dgamma");
      expect_close(gg.dbeta, cg.dbeta, kF32Tol, l + " dbeta");
    }
  }
}

TEST(CudaKernels, EmbeddingMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::int32_t> id_values{3, 0, 9, 3, 3, 7, 1, 9};  // repeats accumulate
  const Tensor ids = Tensor::from(id_values, {2, 4});
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor w = as_input(random({10, 96}, 20), dt);
    expect_close(cuda::embedding_forward(to_gpu(w, dt), ids), cpu::embedding_forward(w, ids), 0.0,
                 dtype_label(dt) + " embedding");
    const Tensor dout = as_input(random({2, 4, 96}, 21), dt);
    Tensor cd = Tensor::zeros({10, 96}), gd = Tensor::zeros({10, 96}, DType::f32, Device::cuda);
    cpu::embedding_backward(cd, dout, ids);
    cuda::embedding_backward(gd, to_gpu(dout, dt), ids);
    expect_close(gd, cd, kF32Tol, dtype_label(dt) + " embedding backward");
  }
  const std::vector<std::int32_t> bad{0, 10};
  EXPECT_THROW(cuda::embedding_forward(random({10, 4}, 1).to(Device::cuda), Tensor::from(bad, {2})), Error);
}

// Smoothing 0.1 with padding index 0 (the trainer's), and no smoothing with an ignore index that
// is no class (-100, PyTorch's), class 0 then a real target.
TEST(CudaKernels, CrossEntropyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& [eps, ignore] : {std::pair{0.1, 0}, std::pair{0.0, -100}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      for (std::int64_t vocab : {5, 1000, 37000}) {
        const std::int64_t n = 23;
        const Tensor logits = as_input(random({n, vocab}, 30, -8, 8), dt);
        std::vector<std::int32_t> t(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i)
          t[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7919) % vocab);
        t[3] = t[11] = ignore;  // ignored rows
        t[5] = 0;               // class 0: a target unless it is the ignore index
        const Tensor targets = Tensor::from(t, {n});
        const std::string l = dtype_label(dt) + " cross entropy V=" + std::to_string(vocab) +
                              " smoothing=" + std::to_string(eps) + " ignore=" + std::to_string(ignore);
        const auto c = cpu::cross_entropy_forward(logits, targets, eps, ignore);
        const auto g = cuda::cross_entropy_forward(to_gpu(logits, dt), targets, eps, ignore);
        expect_close(g.loss, c.loss, kF32Tol, l + " loss");
        expect_close(g.lse, c.lse, kF32Tol, l + " lse");
        expect_close(g.nll, c.nll, kF32Tol, l + " nll");
        const Tensor dloss = Tensor::full({n}, 1.0 / 17.0);
        const Tensor cd = cpu::cross_entropy_backward(dloss, logits, targets, c.lse, eps, ignore);
        expect_close(
            cuda::cross_entropy_backward(dloss.to(Device::cuda), to_gpu(logits, dt), targets, g.lse, eps, ignore), cd,
            tol_of(dt), l + " backward");
        const auto fused = cuda::cross_entropy_fused(to_gpu(logits, dt), targets, eps, ignore, 1.0 / 17.0);
        expect_close(fused.out.loss, c.loss, kF32Tol, l + " fused loss");
        expect_close(fused.dlogits, cd, tol_of(dt), l + " fused gradient");
      }
    }
  }
}

TEST(CudaKernels, GemmMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const std::int64_t m = 37, n = 129, k = 300;
        const Tensor a = as_input(random(ta ? Shape{3, k, m} : Shape{3, m, k}, 40), dt);
        const Tensor b = as_input(random(tb ? Shape{3, n, k} : Shape{3, k, n}, 41), dt);
        const Tensor b2 = as_input(random(tb ? Shape{n, k} : Shape{k, n}, 42), dt);
        const std::string l = dtype_label(dt) + " gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
        // float32 at 1e-4 also tells TF32 (about 4e-4 here) from float32 GEMMs.
        expect_close(cuda::matmul(to_gpu(a, dt), to_gpu(b, dt), ta, tb), cpu::matmul(a, b, ta, tb), tol_of(dt), l);
        expect_close(cuda::matmul(to_gpu(a, dt), to_gpu(b2, dt), ta, tb), cpu::matmul(a, b2, ta, tb), tol_of(dt),
                     l + " shared b");
      }
    }
  }
}

TEST(CudaKernels, FusedAdamIsBitIdenticalToCpu) {
  SKIP_WITHOUT_GPU();
  std::vector<Tensor> w, g, m, v;
  std::vector<cuda::AdamParam> params;
  for (std::int64_t n : {1, 3, 4096, 4097, 100000}) {
    w.push_back(random({n}, 50));
    g.push_back(random({n}, 51, -0.1, 0.1));
    m.push_back(Tensor::zeros({n}));
    v.push_back(Tensor::zeros({n}));
    params.push_back({w.back().to(Device::cuda), g.back().to(Device::cuda), m.back().to(Device::cuda),
                      v.back().to(Device::cuda), Tensor::empty({n}, DType::bf16, Device::cuda)});
  }
  cuda::FusedAdam adam(params);
  for (long t = 1; t <= 3; ++t) {
    const double bc1 = 1.0 - std::pow(0.9, static_cast<double>(t)), bc2 = 1.0 - std::pow(0.98, static_cast<double>(t));
    const cpu::AdamHyper<float> h{0.9f, 0.98f, static_cast<float>(1e-3 / bc1), static_cast<float>(1.0 / bc2), 1e-9f};
    for (std::size_t i = 0; i < w.size(); ++i)
      cpu::adam_update(w[i].data<float>(), g[i].data<float>(), m[i].data<float>(), v[i].data<float>(), w[i].numel(), h);
    adam.step(1e-3, 0.9, 0.98, 1e-9, t);
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    expect_close(params[i].weight, w[i], 0.0, "adam weight");
    expect_close(params[i].exp_avg, m[i], 0.0, "adam exp_avg");
    expect_close(params[i].exp_avg_sq, v[i], 0.0, "adam exp_avg_sq");
    expect_close(params[i].weight_bf16, w[i].to(DType::bf16).to(DType::f32), 0.0, "adam bf16 copy");
  }
}

// Puts cuda::allow_tf32 (train.tf32) back as it was.
struct RestoreTf32 {
  bool was = cuda::allow_tf32();
  ~RestoreTf32() { cuda::set_allow_tf32(was); }
};

struct AttentionCase {
  std::int64_t b, h, lq, lk, d;
  bool causal;
};

std::string describe(const AttentionCase& c, DType dt, bool padded) {
  return dtype_label(dt) + " attention b" + std::to_string(c.b) + " h" + std::to_string(c.h) + " lq" +
         std::to_string(c.lq) + " lk" + std::to_string(c.lk) + " d" + std::to_string(c.d) +
         (c.causal ? " causal" : "") + (padded ? " padded" : "");
}

// Forward and backward of one case against the CPU twin. pad: [b, lk] key padding, or none.
// float32 to 1e-4 throughout; bfloat16 (P and dS rounded to bfloat16 before their products, as in
// FlashAttention): out 2e-2, lse 1e-3, gradients 4e-2.
void expect_attention_matches_cpu(const AttentionCase& c, DType dt, const Tensor& pad, std::uint32_t seed,
                                  double scale = 0.0) {
  const Tensor q = as_input(random({c.b, c.h, c.lq, c.d}, seed, -2, 2), dt);
  const Tensor k = as_input(random({c.b, c.h, c.lk, c.d}, seed + 1, -2, 2), dt);
  const Tensor v = as_input(random({c.b, c.h, c.lk, c.d}, seed + 2), dt);
  const Tensor dout = as_input(random({c.b, c.h, c.lq, c.d}, seed + 3), dt);
  const cpu::AttentionOptions opt{.causal = c.causal, .scale = scale};
  const auto cf = cpu::attention_forward(q, k, v, pad, opt);
  const auto gf = cuda::attention_forward(to_gpu(q, dt), to_gpu(k, dt), to_gpu(v, dt), pad, opt);
  const std::string l = describe(c, dt, pad.defined()) + (scale > 0 ? " scale " + std::to_string(scale) : "");
  const bool f32 = dt == DType::f32;
  expect_close(gf.out, cf.out, tol_of(dt), l + " out");
  expect_close(gf.lse, cf.lse, f32 ? kF32Tol : kF32Tol * 10, l + " lse");
  const auto cg = cpu::attention_backward(dout, q, k, v, pad, cf, opt);
  const auto gg = cuda::attention_backward(to_gpu(dout, dt), to_gpu(q, dt), to_gpu(k, dt), to_gpu(v, dt), pad, gf, opt);
  const double grad_tol = f32 ? kF32Tol : tol_of(dt) * 2;
  expect_close(gg.dq, cg.dq, grad_tol, l + " dq");
  expect_close(gg.dk, cg.dk, grad_tol, l + " dk");
  expect_close(gg.dv, cg.dv, grad_tol, l + " dv");
}

TEST(CudaKernels, FlashAttentionMatchesCpu) {
  SKIP_WITHOUT_GPU();
  // {case, padded}: other key lengths (cross-attention), one query, one key, the head sizes, and
  // two of the benchmark's sequence lengths (1024) in both head sizes it runs.
  const std::vector<std::pair<AttentionCase, bool>> cases{
      {{2, 3, 17, 33, 64, false}, true},     {{2, 3, 64, 64, 64, true}, false},  {{1, 2, 100, 130, 128, false}, true},
      {{2, 2, 130, 130, 128, true}, true},   {{3, 1, 1, 77, 32, false}, true},   {{2, 4, 33, 1, 64, false}, false},
      {{1, 2, 80, 48, 64, true}, false},     {{2, 2, 200, 200, 32, true}, true}, {{1, 2, 1024, 1024, 64, true}, false},
      {{1, 1, 1024, 1024, 128, false}, true}};
  for (DType dt : {DType::f32, DType::bf16}) {
    for (const auto& [c, padded] : cases) {
      Tensor pad;
      if (padded) {  // ragged: row i pads its last i * 5 keys; the last row pads all of them
        std::vector<std::int32_t> p(static_cast<std::size_t>(c.b * c.lk), 0);
        for (std::int64_t i = 0; i < c.b; ++i)
          for (std::int64_t j = 0; j < c.lk; ++j)
            p[static_cast<std::size_t>(i * c.lk + j)] = (i == c.b - 1 && c.b > 2) || j >= c.lk - i * 5 ? 1 : 0;
        pad = Tensor::from(p, {c.b, c.lk});
      }
      expect_attention_matches_cpu(c, dt, pad, 60);
    }
    // An explicit scale instead of 1/sqrt(d), with and without the masks.
    expect_attention_matches_cpu({2, 2, 40, 40, 64, true}, dt, Tensor(), 61, 0.37);
    expect_attention_matches_cpu({2, 2, 17, 33, 64, false}, dt, Tensor::from(std::vector<std::int32_t>(66, 0), {2, 33}),
                                 62, 1.5);
  }
}

// A decoder step over a preallocated cache: the kernels themselves read the first key_length
// positions of k and v [b, h, capacity, d] (the rest NaN, which a read past key_length spreads).
TEST(CudaKernels, FlashAttentionReadsADecoderCacheInPlace) {
  SKIP_WITHOUT_GPU();
  const std::int64_t capacity = 90, key_length = 70;
  for (DType dt : {DType::f32, DType::bf16})
    for (std::int64_t d : {32, 64, 128}) {
      Tensor k = as_input(random({2, 3, capacity, d}, 63), dt), v = as_input(random({2, 3, capacity, d}, 64), dt);
      for (Tensor* t : {&k, &v})
        for (std::int64_t bh = 0; bh < 6; ++bh)
          std::fill_n(t->data<float>() + (bh * capacity + key_length) * d, (capacity - key_length) * d, std::nanf(""));
      const Tensor q = as_input(random({2, 3, 1, d}, 65), dt);
      const cpu::AttentionOptions opt{.causal = false, .scale = 0.0, .key_length = key_length};
      const auto cf = cpu::attention_forward(q, k, v, Tensor(), opt);
      const auto gf = cuda::attention_forward(to_gpu(q, dt), to_gpu(k, dt), to_gpu(v, dt), Tensor(), opt);
      const std::string l = dtype_label(dt) + " cache d" + std::to_string(d);
      expect_close(gf.out, cf.out, tol_of(dt), l + " out");
      expect_close(gf.lse, cf.lse, dt == DType::f32 ? kF32Tol : 10 * kF32Tol, l + " lse");
    }
}

// float32 attention with train.tf32 runs on the TF32 tensor cores at d 64 and 128: its result is
// not the exact float32 kernels' (which would pass the tolerance too), and stays within it.
TEST(CudaKernels, Tf32AttentionRoundsItsOperands) {
  SKIP_WITHOUT_GPU();
  const RestoreTf32 restore;
  for (std::int64_t d : {64, 128}) {
    const Tensor q = random({2, 2, 70, d}, 66), k = random({2, 2, 90, d}, 67), v = random({2, 2, 90, d}, 68);
    const cpu::AttentionOptions opt{.causal = true};
    const auto on_gpu = [&](bool tf32) {
      cuda::set_allow_tf32(tf32);
      return from_gpu(
          cuda::attention_forward(q.to(Device::cuda), k.to(Device::cuda), v.to(Device::cuda), Tensor(), opt).out);
    };
    const Tensor exact = on_gpu(false), tf32 = on_gpu(true);
    double differs = 0.0;
    for (std::int64_t i = 0; i < exact.numel(); ++i)
      differs = std::max(differs, static_cast<double>(std::abs(exact.data<float>()[i] - tf32.data<float>()[i])));
    EXPECT_GT(differs, 1e-6) << "d " << d << ": train.tf32 gave the exact float32 kernels' result";
    expect_close(tf32, cpu::attention_forward(q, k, v, Tensor(), opt).out, kTf32AttentionTol,
                 "tf32 attention d " + std::to_string(d));
  }
}

// Shapes drawn at random (seed TESSERA_GPU_TEST_SEED, else a fixed one; printed on failure):
// attention with ragged key lengths, layer norm, cross entropy and GEMM.
TEST(CudaKernels, RandomShapesMatchCpu) {
  SKIP_WITHOUT_GPU();
  const char* env = std::getenv("TESSERA_GPU_TEST_SEED");
  const std::uint32_t seed = env != nullptr ? static_cast<std::uint32_t>(std::strtoul(env, nullptr, 10)) : 20261201u;
  SCOPED_TRACE("TESSERA_GPU_TEST_SEED=" + std::to_string(seed));
  std::mt19937 gen(seed);
  const auto draw = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int i = 0; i < 6; ++i) {
      const std::int64_t heads[] = {32, 64, 128};
      const AttentionCase c{draw(1, 3), draw(1, 4), draw(1, 300), draw(1, 300), heads[draw(0, 2)], draw(0, 1) == 1};
      Tensor pad;
      if (draw(0, 2) > 0) {  // ragged: each sequence keeps 0 to lk keys
        std::vector<std::int32_t> p(static_cast<std::size_t>(c.b * c.lk), 0);
        for (std::int64_t r = 0; r < c.b; ++r) {
          const std::int64_t keep = draw(0, c.lk);
          for (std::int64_t j = keep; j < c.lk; ++j) p[static_cast<std::size_t>(r * c.lk + j)] = 1;
        }
        pad = Tensor::from(p, {c.b, c.lk});
      }
      expect_attention_matches_cpu(c, dt, pad, static_cast<std::uint32_t>(draw(0, 1 << 20)));
    }
    const std::string l = dtype_label(dt);
    for (int i = 0; i < 4; ++i) {
      const std::int64_t rows = draw(1, 400), cols = draw(1, 3000);
      const std::string w = l + " layer norm " + std::to_string(rows) + "x" + std::to_string(cols);
      const Tensor x = as_input(random({rows, cols}, 100 + i, -3, 3), dt),
                   dy = as_input(random({rows, cols}, 110 + i), dt);
      const Tensor gamma = random({cols}, 120 + i, 0.5, 1.5), beta = random({cols}, 130 + i);
      const auto c = cpu::layer_norm_forward(x, gamma, beta, 1e-5);
      const auto g = cuda::layer_norm_forward(to_gpu(x, dt), gamma.to(Device::cuda), beta.to(Device::cuda), 1e-5);
      expect_close(g.y, c.y, tol_of(dt), w + " y");
      const auto cg = cpu::layer_norm_backward(dy, x, gamma, c.mean, c.rstd);
      const auto gg = cuda::layer_norm_backward(to_gpu(dy, dt), to_gpu(x, dt), gamma.to(Device::cuda), g.mean, g.rstd);
      expect_close(gg.dx, cg.dx, tol_of(dt), w + " dx");
      expect_close(gg.dgamma, cg.dgamma, kF32Tol, w + " dgamma");
    }
    for (int i = 0; i < 4; ++i) {
      const std::int64_t n = draw(1, 200), vocab = draw(2, 40000);
      const std::string w = l + " cross entropy n" + std::to_string(n) + " V" + std::to_string(vocab);
      const Tensor logits = as_input(random({n, vocab}, 140 + i, -8, 8), dt);
      std::vector<std::int32_t> t(static_cast<std::size_t>(n));
      for (auto& id : t) id = static_cast<std::int32_t>(draw(0, vocab - 1));  // 0 (padding) is ignored
      const Tensor targets = Tensor::from(t, {n});
      const auto c = cpu::cross_entropy_forward(logits, targets, 0.1, 0);
      const auto fused = cuda::cross_entropy_fused(to_gpu(logits, dt), targets, 0.1, 0, 0.5);
      expect_close(fused.out.loss, c.loss, kF32Tol, w + " loss");
      const Tensor cd = cpu::cross_entropy_backward(Tensor::full({n}, 0.5), logits, targets, c.lse, 0.1, 0);
      expect_close(fused.dlogits, cd, tol_of(dt), w + " gradient");
    }
    for (int i = 0; i < 4; ++i) {
      const std::int64_t m = draw(1, 300), n = draw(1, 300), k = draw(1, 600);
      const bool ta = draw(0, 1) == 1, tb = draw(0, 1) == 1;
      const Tensor a = as_input(random(ta ? Shape{k, m} : Shape{m, k}, 150 + i), dt);
      const Tensor b = as_input(random(tb ? Shape{n, k} : Shape{k, n}, 160 + i), dt);
      expect_close(cuda::matmul(to_gpu(a, dt), to_gpu(b, dt), ta, tb), cpu::matmul(a, b, ta, tb), tol_of(dt),
                   l + " gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                       " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  }
}

// Gradient clipping's two kernels over a model's worth of tensor sizes: the global sum of squares
// (float32 sums on the GPU against the CPU's double) and the in-place scale.
TEST(CudaKernels, GradientClippingMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string l = dtype_label(dt);
    std::vector<Tensor> cpu_grads, gpu_grads;
    std::uint32_t seed = 80;
    for (const Shape& shape : {Shape{1}, Shape{0}, Shape{512}, Shape{37, 129}, Shape{1000003}, Shape{3, 4097}}) {
      cpu_grads.push_back(as_input(random(shape, seed++, -0.5, 0.5), dt));
      gpu_grads.push_back(to_gpu(cpu_grads.back(), dt));
    }
    const double c = kernels::sum_of_squares(cpu_grads), g = kernels::sum_of_squares(gpu_grads);
    // bfloat16: each square and the sum are rounded to bfloat16 on the GPU.
    EXPECT_NEAR(g, c, tol_of(dt) * c) << l << " sum of squares";
    EXPECT_EQ(kernels::sum_of_squares({Tensor::zeros({0}, dt, Device::cuda)}), 0.0) << l << " empty";
    for (std::size_t i = 0; i < cpu_grads.size(); ++i) {
      Tensor expected = cpu_grads[i].clone();
      kernels::scale_inplace(expected, 0.37);
      kernels::scale_inplace(gpu_grads[i], 0.37);
      expect_close(gpu_grads[i], dt == DType::bf16 ? expected.to(DType::bf16).to(DType::f32) : expected, tol_of(dt),
                   l + " scale_inplace " + shape_str(cpu_grads[i].shape()));
    }
  }
}

// The output projection's softmax rows: a vocabulary's width, more than one block's worth of
// columns per thread, and a width that is no power of two.
TEST(CudaKernels, SoftmaxAtVocabularyWidthMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (std::int64_t cols : {8001, 32768, 37000, 100003}) {
      const std::string l = dtype_label(dt) + " softmax width " + std::to_string(cols);
      const Tensor x = as_input(random({3, cols}, 90, -10, 10), dt), dy = as_input(random({3, cols}, 91), dt);
      const Tensor ys = cpu::softmax_lastdim(x), yl = cpu::log_softmax_lastdim(x);
      // Probabilities of about 1/cols: compared as cols * p (up to about 20 here), or a GPU result
      // of zeros would pass |gpu - cpu| <= tol * (1 + |cpu|).
      const auto times_cols = [cols](const Tensor& t) {
        return cpu::affine(from_gpu(t), static_cast<double>(cols), 0);
      };
      expect_close(times_cols(cuda::softmax_lastdim(to_gpu(x, dt))), times_cols(ys), tol_of(dt), l);
      expect_close(cuda::log_softmax_lastdim(to_gpu(x, dt)), yl, tol_of(dt), l + " log");
      const Tensor yl_in = as_input(yl, dt);
      expect_close(cuda::log_softmax_backward(to_gpu(dy, dt), to_gpu(yl_in, dt)), cpu::log_softmax_backward(dy, yl_in),
                   tol_of(dt), l + " log backward");
    }
  }
}

// float32 GEMMs on TF32 tensor cores (train.tf32): each input keeps 10 of float32's 23 mantissa
// bits, so a product is off by at most 2^-9 of its size (truncation or rounding of both inputs)
// and an element by at most 2^-8 of sum |a||b| with float32 accumulation's error included.
TEST(CudaKernels, Tf32GemmStaysWithinItsRoundingBound) {
  SKIP_WITHOUT_GPU();
  const RestoreTf32 restore;
  cuda::set_allow_tf32(true);
  const auto absolute = [](const Tensor& t) {
    Tensor r = t.clone();
    for (std::int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = std::abs(r.data<float>()[i]);
    return r;
  };
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::int64_t m = 65, n = 130, k = 1000;
      const Tensor a = random(ta ? Shape{k, m} : Shape{m, k}, 95), b = random(tb ? Shape{n, k} : Shape{k, n}, 96);
      const Tensor g = from_gpu(cuda::matmul(a.to(Device::cuda), b.to(Device::cuda), ta, tb));
      const Tensor c = cpu::matmul(a, b, ta, tb);
      const Tensor bound = cpu::matmul(absolute(a), absolute(b), ta, tb);
      std::int64_t over = 0;
      for (std::int64_t i = 0; i < c.numel(); ++i) {
        const double e = std::abs(static_cast<double>(g.data<float>()[i]) - c.data<float>()[i]);
        over += e <= std::ldexp(static_cast<double>(bound.data<float>()[i]), -8) ? 0 : 1;
      }
      EXPECT_EQ(over, 0) << "tf32 gemm ta=" << ta << " tb=" << tb << ": elements past 2^-8 sum |a||b|";
    }
  }
}

// Embedding lookups and their scatter-add at drawn sizes (ids repeat), and the layout kernels of
// incremental decoding in both dtypes: concat along each dimension, empty parts included, and row
// gathers with repeats. Layout moves bytes: exact.
TEST(CudaKernels, EmbeddingAndLayoutAtRandomShapesMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 gen(20261202u);
  const auto draw = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string l = dtype_label(dt);
    for (int i = 0; i < 5; ++i) {
      const std::int64_t vocab = draw(1, 5000), width = draw(1, 1100), rows = draw(1, 8), len = draw(1, 60);
      std::vector<std::int32_t> id_values(static_cast<std::size_t>(rows * len));
      for (auto& id : id_values) id = static_cast<std::int32_t>(draw(0, std::min<std::int64_t>(vocab - 1, 40)));
      const Tensor ids = Tensor::from(id_values, {rows, len});
      const std::string w = l + " embedding V" + std::to_string(vocab) + " width " + std::to_string(width) + " ids " +
                            std::to_string(rows) + "x" + std::to_string(len);
      const Tensor weight = as_input(random({vocab, width}, 200 + i), dt);
      expect_close(cuda::embedding_forward(to_gpu(weight, dt), ids), cpu::embedding_forward(weight, ids), 0.0, w);
      const Tensor dout = as_input(random({rows, len, width}, 210 + i), dt);
      Tensor cd = Tensor::zeros({vocab, width}), gd = Tensor::zeros({vocab, width}, DType::f32, Device::cuda);
      cpu::embedding_backward(cd, dout, ids);
      cuda::embedding_backward(gd, to_gpu(dout, dt), ids);
      expect_close(gd, cd, kF32Tol, w + " backward");
    }
    for (int i = 0; i < 8; ++i) {
      const std::int64_t rank = draw(1, 4), dim = draw(0, rank - 1);
      Shape shape(static_cast<std::size_t>(rank));
      for (auto& s : shape) s = draw(1, 9);
      std::vector<Tensor> parts, gpu_parts;
      for (std::int64_t p = draw(1, 4); p > 0; --p) {
        shape[static_cast<std::size_t>(dim)] = draw(0, 5);
        parts.push_back(as_input(random(shape, 220 + static_cast<std::uint32_t>(parts.size() + 10 * i)), dt));
        gpu_parts.push_back(to_gpu(parts.back(), dt));
      }
      std::string w = l + " concat dim " + std::to_string(dim) + " of";
      for (const Tensor& p : parts) w.append(" ").append(shape_str(p.shape()));
      expect_close(cuda::concat(gpu_parts, dim), cpu::concat(parts, dim), 0.0, w);
      std::vector<std::int64_t> picks;
      if (parts.front().size(0) > 0)
        for (std::int64_t n = draw(0, 12); n > 0; --n) picks.push_back(draw(0, parts.front().size(0) - 1));
      expect_close(cuda::index_rows(gpu_parts.front(), picks), cpu::index_rows(parts.front(), picks), 0.0,
                   l + " index_rows of " + shape_str(parts.front().shape()));
    }
  }
}

// cudaMemcpy2DAsync refuses a pitch above the device's maximum (2 GiB - 1 bytes on A100/H100/H200),
// so concat copies output rows that wide one at a time. Reaching that on a GPU takes gigabytes,
// so the test skips there; ctest's cuda_emulator.concat_past_max_pitch sets the CUDA emulator's
// limit to 16 bytes, which every output row here passes. Parts of several widths (one empty),
// along each dimension, in both dtypes: exact.
TEST(CudaKernels, ConcatOfRowsPastTheMaxPitchMatchesCpu) {
  SKIP_WITHOUT_GPU();
  int device = 0, max_pitch = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device), cudaSuccess);
  if (max_pitch > 16)
    GTEST_SKIP() << "this GPU's max pitch (" << max_pitch << " bytes) is too large to pass at test sizes";
  for (DType dt : {DType::f32, DType::bf16}) {
    for (std::int64_t dim = 0; dim < 4; ++dim) {
      std::vector<Tensor> parts, gpu_parts;
      for (std::int64_t extent : {3, 0, 7, 1}) {
        Shape shape{3, 5, 9, 4};
        shape[static_cast<std::size_t>(dim)] = extent;
        parts.push_back(as_input(random(shape, 300 + static_cast<std::uint32_t>(parts.size() + 10 * dim)), dt));
        gpu_parts.push_back(to_gpu(parts.back(), dt));
      }
      const Tensor want = cpu::concat(parts, dim);
      std::int64_t outer = 1;
      for (std::int64_t i = 0; i < dim; ++i) outer *= want.size(i);
      ASSERT_GT(static_cast<std::int64_t>(want.nbytes()) / outer, max_pitch) << "an output row must pass the limit";
      expect_close(cuda::concat(gpu_parts, dim), want, 0.0, dtype_label(dt) + " concat dim " + std::to_string(dim));
    }
  }
}

// Empty inputs give what the CPU twins give: empty results, or zeros where a sum has no terms
// (GEMM with K = 0, attention with no key), and no launch error.
TEST(CudaKernels, EmptyInputsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string l = dtype_label(dt) + " empty";
    for (const auto& [a_shape, b_shape] : {std::pair<Shape, Shape>{{3, 0}, {0, 5}},
                                           {{0, 3}, {3, 5}},
                                           {{2, 0, 3}, {3, 4}},
                                           {{0, 2, 3}, {0, 3, 4}},
                                           {{2, 4, 0}, {0, 6}}}) {
      const Tensor a = Tensor::zeros(a_shape), b = Tensor::zeros(b_shape);
      expect_close(cuda::matmul(to_gpu(a, dt), to_gpu(b, dt), false, false), cpu::matmul(a, b), 0.0,
                   l + " gemm " + shape_str(a_shape) + " @ " + shape_str(b_shape));
    }
    const Tensor x = Tensor::zeros({0, 4});
    expect_close(cuda::binary(cpu::BinaryOp::add, to_gpu(x, dt), to_gpu(x, dt)), x, 0.0, l + " binary");
    expect_close(cuda::sum_all(to_gpu(x, dt)), cpu::sum_all(x), 0.0, l + " sum_all");
    expect_close(cuda::sum_dim(to_gpu(x, dt), 0, false), cpu::sum_dim(x, 0, false), 0.0, l + " sum_dim");
    expect_close(cuda::softmax_lastdim(to_gpu(x, dt)), x, 0.0, l + " softmax");
    const auto ln = cuda::layer_norm_forward(to_gpu(x, dt), Tensor::ones({4}).to(Device::cuda),
                                             Tensor::zeros({4}).to(Device::cuda), 1e-5);
    expect_close(ln.y, x, 0.0, l + " layer norm");
    expect_close(
        cuda::layer_norm_backward(to_gpu(x, dt), to_gpu(x, dt), Tensor::ones({4}).to(Device::cuda), ln.mean, ln.rstd)
            .dgamma,
        Tensor::zeros({4}), 0.0, l + " layer norm dgamma");
    const Tensor no_targets = Tensor::from(std::vector<std::int32_t>{}, {0});
    expect_close(cuda::cross_entropy_fused(to_gpu(Tensor::zeros({0, 7}), dt), no_targets, 0.1, 0, 1.0).dlogits,
                 Tensor::zeros({0, 7}), 0.0, l + " cross entropy");
    // No query; no key (out 0, log-sum-exp -inf, dq 0).
    const cpu::AttentionOptions opt{.causal = false};
    for (const auto& [lq, lk] : {std::pair<std::int64_t, std::int64_t>{0, 5}, {3, 0}}) {
      const Tensor q = Tensor::ones({1, 2, lq, 32}), k = Tensor::ones({1, 2, lk, 32});
      const auto cf = cpu::attention_forward(q, k, k, Tensor(), opt);
      const auto gf = cuda::attention_forward(to_gpu(q, dt), to_gpu(k, dt), to_gpu(k, dt), Tensor(), opt);
      const std::string w = l + " attention lq " + std::to_string(lq) + " lk " + std::to_string(lk);
      expect_close(gf.out, cf.out, 0.0, w + " out");
      expect_close(gf.lse, cf.lse, 0.0, w + " lse");
      const auto cg = cpu::attention_backward(q, q, k, k, Tensor(), cf, opt);
      const auto gg =
          cuda::attention_backward(to_gpu(q, dt), to_gpu(q, dt), to_gpu(k, dt), to_gpu(k, dt), Tensor(), gf, opt);
      expect_close(gg.dq, cg.dq, 0.0, w + " dq");
      expect_close(gg.dk, cg.dk, 0.0, w + " dk");
      expect_close(gg.dv, cg.dv, 0.0, w + " dv");
    }
  }
}

// A NaN score reaches the rows that see it, as on the CPU (fmaxf would drop it and the row would
// look like one that sees no key): the same entries are NaN, the others agree.
TEST(CudaKernels, FlashAttentionKeepsANaNWhereTheCpuDoes) {
  SKIP_WITHOUT_GPU();
  const std::int64_t L = 100, D = 64;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor kr = random({1, 2, L, D}, 71, -2, 2), qr = random({1, 2, L, D}, 70, -2, 2);
    kr.data<float>()[70 * D + 5] = std::numeric_limits<float>::quiet_NaN();   // head 0, key 70
    qr.data<float>()[(L + 3) * D] = std::numeric_limits<float>::quiet_NaN();  // head 1, query 3
    const Tensor q = as_input(qr, dt), k = as_input(kr, dt);
    const Tensor v = as_input(random({1, 2, L, D}, 72), dt);
    const cpu::AttentionOptions opt{.causal = true};
    const auto cf = cpu::attention_forward(q, k, v, Tensor(), opt);
    const auto gf = cuda::attention_forward(to_gpu(q, dt), to_gpu(k, dt), to_gpu(v, dt), Tensor(), opt);
    for (const auto& [gpu, cpu_ref, what] : {std::tuple{gf.out, cf.out, "out"}, std::tuple{gf.lse, cf.lse, "lse"}}) {
      const Tensor g = from_gpu(gpu), c = cpu_ref.to(DType::f32);
      std::int64_t nans = 0;
      for (std::int64_t i = 0; i < c.numel(); ++i) {
        const float a = g.data<float>()[i], b = c.data<float>()[i];
        ASSERT_EQ(std::isnan(a), std::isnan(b)) << dtype_label(dt) << " " << what << " at " << i;
        nans += std::isnan(b) ? 1 : 0;
        if (std::isfinite(b)) {
          ASSERT_NEAR(a, b, tol_of(dt) * 10 * (1 + std::abs(b))) << dtype_label(dt) << " " << what << " at " << i;
        }
      }
      EXPECT_GT(nans, 0) << what;
    }
  }
}

TEST(CudaAllocator, SteadyStateMakesNoCudaMalloc) {
  SKIP_WITHOUT_GPU();
  const auto step = [] {  // the shapes of a small step, allocated and freed
    Tensor a = Tensor::empty({512, 1024}, DType::f32, Device::cuda);
    Tensor b = Tensor::empty({512, 4096}, DType::bf16, Device::cuda);
    Tensor c = Tensor::empty({33}, DType::f32, Device::cuda);
  };
  step();
  const MemoryStats before = device_memory_stats();
  for (int i = 0; i < 10; ++i) step();
  const MemoryStats after = device_memory_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_GE(after.peak_in_use, 512u * 1024 * 4 + 512u * 4096 * 2);
  EXPECT_EQ(after.in_use, before.in_use);
}

}  // namespace
}  // namespace tessera
