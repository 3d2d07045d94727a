// Every op of kernels/ops.h on each backend built, against the CPU (ggml's test-backend-ops): one
// test per op runs its cases (shape families) for float32 and bfloat16 on the CPU, then on the GPU
// (or the CUDA emulator) and compares, with tests/gpu's tolerances (gpu_test_util.h). An op in the
// list without a case fails here on every build, so a new op without a twin test fails CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace tessera::kernels;

// Where a case runs: the CPU in float32 on bfloat16-rounded inputs for a bfloat16 case (as
// tests/gpu compares), or the GPU with its inputs stored in the case's dtype.
struct Backend {
  Device device;
  DType dtype;
  bool gpu() const { return device == Device::cuda; }
  Tensor elem(const Tensor& t) const { return gpu() ? to_gpu(t, dtype) : as_input(t, dtype); }
  Tensor f32(const Tensor& t) const { return t.to(device); }  // float32 on both (statistics, gamma)
  Tensor ids(const Tensor& t) const { return t.to(device); }
  DType storage() const { return gpu() ? dtype : DType::f32; }
  double tol() const { return tol_of(dtype); }
};

struct Out {
  std::string what;
  Tensor value;
  double tol;
};

struct OpCase {
  std::string op;      // a name in TESSERA_KERNEL_OPS
  std::string family;  // the shape family
  std::function<std::vector<Out>(const Backend&)> run;
  bool f32_only = false;
};

Tensor ids_tensor(std::vector<std::int32_t> v, const Shape& shape) { return Tensor::from(v, shape); }

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> c;
  for (const auto& fam_shape : {std::pair<const char*, Shape>{"same_shape", {7, 33, 65}}, {"bias_suffix", {65}}})
    c.push_back({"binary", fam_shape.first, [bshape = fam_shape.second](const Backend& b) {
                   const Tensor x = b.elem(random({7, 33, 65}, 1)), y = b.elem(random(bshape, 2, 0.5, 2.0));
                   std::vector<Out> r;
                   for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div})
                     r.push_back({"op " + std::to_string(static_cast<int>(op)), binary(op, x, y), b.tol()});
                   return r;
                 }});
  c.push_back({"unary", "odd_rows", [](const Backend& b) {
                 const Tensor x = b.elem(random({7, 33, 65}, 3)), pos = b.elem(random({7, 33, 65}, 4, 0.1, 3.0));
                 std::vector<Out> r;
                 for (UnaryOp op : {UnaryOp::neg, UnaryOp::relu, UnaryOp::exp, UnaryOp::tanh})
                   r.push_back({"op " + std::to_string(static_cast<int>(op)), unary(op, x), b.tol()});
                 r.push_back({"log", unary(UnaryOp::log, pos), b.tol()});
                 return r;
               }});
  c.push_back({"affine", "odd_rows", [](const Backend& b) {
                 return std::vector<Out>{{"y", affine(b.elem(random({9, 130}, 5)), 0.5, -2.0), b.tol()}};
               }});
  c.push_back({"relu_backward", "odd_rows", [](const Backend& b) {
                 const Tensor dy = b.elem(random({9, 130}, 6)), x = b.elem(random({9, 130}, 7));
                 return std::vector<Out>{{"dx", relu_backward(dy, x), b.tol()}};
               }});
  c.push_back({"bias_relu_inplace", "odd_rows", [](const Backend& b) {
                 Tensor biased = b.elem(random({7, 9, 130}, 20)), both = b.elem(random({7, 9, 130}, 20)),
                        relu_only = b.elem(random({9, 130}, 21));
                 const Tensor bias = b.elem(random({130}, 22));
                 bias_relu_inplace(biased, bias, false);
                 bias_relu_inplace(both, bias, true);
                 bias_relu_inplace(relu_only, Tensor(), true);
                 return std::vector<Out>{
                     {"y + b", biased, b.tol()}, {"relu(y + b)", both, b.tol()}, {"relu(y)", relu_only, b.tol()}};
               }});
  c.push_back({"add_inplace", "flat", [](const Backend& b) {
                 Tensor dst = b.elem(random({1000}, 8));
                 add_inplace(dst, b.elem(random({1000}, 9)), 0.25);
                 return std::vector<Out>{{"dst", dst, b.tol()}};
               }});
  c.push_back({"scale_inplace", "flat", [](const Backend& b) {
                 Tensor t = b.elem(random({1000}, 10));
                 scale_inplace(t, -0.75);
                 return std::vector<Out>{{"t", t, b.tol()}};
               }});
  c.push_back({"sum_of_squares", "several_tensors", [](const Backend& b) {
                 const double s = sum_of_squares({b.elem(random({300}, 11)), b.elem(random({7, 9}, 12))});
                 return std::vector<Out>{{"sum", Tensor::full({}, s, DType::f32), b.tol()}};
               }});
  for (const auto& fam_to : {std::pair<const char*, Shape>{"to_last_dim", {65}}, {"to_suffix", {33, 65}}})
    c.push_back({"sum_to_shape", fam_to.first, [to = fam_to.second](const Backend& b) {
                   return std::vector<Out>{{"sum", sum_to_shape(b.elem(random({7, 33, 65}, 13)), to), b.tol()}};
                 }});
  c.push_back({"broadcast_to", "from_suffix", [](const Backend& b) {
                 return std::vector<Out>{{"y", broadcast_to(b.elem(random({65}, 14)), {7, 33, 65}), 0.0}};
               }});
  c.push_back({"cast", "round_trip", [](const Backend& b) {
                 const Tensor x = b.elem(random({4097}, 15, -100, 100));
                 return std::vector<Out>{{"to bf16", cast(x, DType::bf16), 0.0}, {"to f32", cast(x, DType::f32), 0.0}};
               }});
  c.push_back({"full", "filled", [](const Backend& b) {
                 return std::vector<Out>{{"t", full({3, 5}, 2.5, b.storage(), b.device), 0.0}};
               }});
  return c;
}

std::vector<OpCase> gemm_and_layout_cases() {
  std::vector<OpCase> c;
  c.push_back({"matmul", "plain_2d", [](const Backend& b) {
                 const Tensor x = b.elem(random({33, 65}, 20)), w = b.elem(random({17, 65}, 21));
                 return std::vector<Out>{{"x w^T", matmul(x, w, false, true), b.tol()}};
               }});
  c.push_back({"matmul", "batched_transposed", [](const Backend& b) {
                 const Tensor x = b.elem(random({3, 33, 17}, 22)), y = b.elem(random({3, 9, 33}, 23));
                 return std::vector<Out>{{"x^T y^T", matmul(x, y, true, true), b.tol()}};
               }});
  c.push_back({"matmul", "shared_b", [](const Backend& b) {
                 const Tensor x = b.elem(random({2, 5, 7}, 24)), w = b.elem(random({3, 7}, 25));
                 return std::vector<Out>{{"x w^T", matmul(x, w, false, true), b.tol()}};
               }});
  c.push_back({"linear_bias_relu", "odd_rows", [](const Backend& b) {
                 const Tensor x = b.elem(random({33, 65}, 20)), w = b.elem(random({130, 65}, 21));
                 const Tensor bias = b.elem(random({130}, 22));
                 return std::vector<Out>{{"x w^T + b", linear_bias_relu(x, w, bias, false), b.tol()},
                                         {"relu(x w^T + b)", linear_bias_relu(x, w, bias, true), b.tol()},
                                         {"relu(x w^T)", linear_bias_relu(x, w, Tensor(), true), b.tol()}};
               }});
  c.push_back({"matmul_batch_sum", "transposed_a", [](const Backend& b) {
                 const Tensor x = b.elem(random({4, 9, 5}, 26)), y = b.elem(random({4, 9, 6}, 27));
                 const Tensor z = b.elem(random({4, 6, 9}, 28));
                 return std::vector<Out>{{"a^T b", matmul_batch_sum(x, y, true, false), b.tol()},
                                         {"a^T b^T", matmul_batch_sum(x, z, true, true), b.tol()}};
               }});
  c.push_back({"permute", "rank3_and_rank4", [](const Backend& b) {
                 return std::vector<Out>{{"3-D", permute(b.elem(random({3, 4, 5}, 29)), {2, 0, 1}), 0.0},
                                         {"4-D", permute(b.elem(random({2, 3, 4, 5}, 30)), {0, 2, 1, 3}), 0.0}};
               }});
  c.push_back({"concat", "middle_dim", [](const Backend& b) {
                 const Tensor x = b.elem(random({2, 3, 4}, 31)), y = b.elem(random({2, 5, 4}, 32));
                 return std::vector<Out>{{"dim 1", concat({x, y}, 1), 0.0}};
               }});
  c.push_back({"index_rows", "repeated_rows", [](const Backend& b) {
                 return std::vector<Out>{{"rows", index_rows(b.elem(random({6, 4, 3}, 33)), {5, 0, 0, 2}), 0.0}};
               }});
  c.push_back({"copy_time_range", "cache_reorder_and_append", [](const Backend& b) {
                 // A beam reorder (rows repeat) of positions [0, 3), then one position written at 3.
                 const Tensor dst = b.elem(random({4, 2, 6, 3}, 34)), src = b.elem(random({5, 2, 4, 3}, 35));
                 copy_time_range(dst, 0, src, {4, 1, 1}, 0, 3);
                 copy_time_range(dst, 3, b.elem(random({4, 2, 1, 3}, 36)), {}, 0, 1);
                 return std::vector<Out>{{"dst", dst, 0.0}};
               }});
  return c;
}

std::vector<OpCase> reduction_cases() {
  std::vector<OpCase> c;
  c.push_back({"sum_all", "many_blocks", [](const Backend& b) {
                 return std::vector<Out>{{"sum", sum_all(b.elem(random({5003}, 40))), b.tol()}};
               }});
  c.push_back({"mean_all", "odd_rows", [](const Backend& b) {
                 return std::vector<Out>{{"mean", mean_all(b.elem(random({5, 7, 30}, 41))), b.tol()}};
               }});
  for (const char* op : {"sum_dim", "mean_dim"})
    c.push_back({op, "each_dim_keepdim", [op = std::string(op)](const Backend& b) {
                   const Tensor x = b.elem(random({5, 7, 30}, 42));
                   std::vector<Out> r;
                   for (std::int64_t dim : {0, 1, -1})
                     for (bool keep : {false, true})
                       r.push_back({"dim " + std::to_string(dim) + (keep ? " keepdim" : ""),
                                    op == "sum_dim" ? sum_dim(x, dim, keep) : mean_dim(x, dim, keep), b.tol()});
                   return r;
                 }});
  c.push_back({"softmax_lastdim", "long_rows", [](const Backend& b) {
                 return std::vector<Out>{{"y", softmax_lastdim(b.elem(random({5, 7, 300}, 43, -4, 4))), b.tol()}};
               }});
  c.push_back({"log_softmax_lastdim", "long_rows", [](const Backend& b) {
                 return std::vector<Out>{{"y", log_softmax_lastdim(b.elem(random({5, 7, 300}, 44, -4, 4))), b.tol()}};
               }});
  // The backward from the same (CPU-made) forward output on both sides.
  c.push_back({"softmax_backward", "long_rows", [](const Backend& b) {
                 const Tensor y = softmax_lastdim(as_input(random({5, 7, 300}, 45, -4, 4), b.dtype));
                 return std::vector<Out>{{"dx", softmax_backward(b.elem(random({5, 7, 300}, 46)), b.elem(y)), b.tol()}};
               }});
  c.push_back(
      {"log_softmax_backward", "long_rows", [](const Backend& b) {
         const Tensor y = log_softmax_lastdim(as_input(random({5, 7, 300}, 47, -4, 4), b.dtype));
         return std::vector<Out>{{"dx", log_softmax_backward(b.elem(random({5, 7, 300}, 48)), b.elem(y)), b.tol()}};
       }});
  return c;
}

std::vector<OpCase> layer_norm_embedding_dropout_cases() {
  std::vector<OpCase> c;
  c.push_back({"layer_norm_forward", "rows", [](const Backend& b) {
                 const auto f = layer_norm_forward(b.elem(random({6, 48}, 50, -2, 3)), b.f32(random({48}, 51)),
                                                   b.f32(random({48}, 52)), 1e-5);
                 return std::vector<Out>{{"y", f.y, b.tol()}, {"mean", f.mean, kF32Tol}, {"rstd", f.rstd, kF32Tol}};
               }});
  c.push_back(
      {"layer_norm_backward", "rows", [](const Backend& b) {
         const Tensor x = as_input(random({6, 48}, 53, -2, 3), b.dtype), gamma = random({48}, 54);
         const auto f = layer_norm_forward(x, gamma, random({48}, 55), 1e-5);  // CPU statistics for both
         const auto g =
             layer_norm_backward(b.elem(random({6, 48}, 56)), b.elem(x), b.f32(gamma), b.f32(f.mean), b.f32(f.rstd));
         return std::vector<Out>{{"dx", g.dx, b.tol()}, {"dgamma", g.dgamma, kF32Tol}, {"dbeta", g.dbeta, kF32Tol}};
       }});
  c.push_back({"embedding_forward", "table_lookup", [](const Backend& b) {
                 const Tensor ids = ids_tensor({3, 0, 49, 7, 7, 12}, {2, 3});
                 return std::vector<Out>{{"out", embedding_forward(b.elem(random({50, 16}, 57)), b.ids(ids)), 0.0}};
               }});
  c.push_back({"embedding_backward", "repeated_ids", [](const Backend& b) {
                 Tensor dweight = b.f32(Tensor::zeros({50, 16}, DType::f32));
                 embedding_backward(dweight, b.elem(random({6, 16}, 58)), b.ids(ids_tensor({3, 0, 49, 7, 7, 3}, {6})));
                 return std::vector<Out>{{"dweight", dweight, kF32Tol}};
               }});
  // Vocabulary parallelism: ids of other ranks' rows (-1) give zeros and no gradient.
  c.push_back({"embedding_forward", "zero_id", [](const Backend& b) {
                 const Tensor ids = ids_tensor({3, -1, 49, -1, 7, 12}, {2, 3});
                 return std::vector<Out>{{"out", embedding_forward(b.elem(random({50, 16}, 62)), b.ids(ids), -1), 0.0}};
               }});
  c.push_back(
      {"embedding_backward", "zero_id", [](const Backend& b) {
         Tensor dweight = b.f32(Tensor::zeros({50, 16}, DType::f32));
         embedding_backward(dweight, b.elem(random({6, 16}, 63)), b.ids(ids_tensor({3, -1, 49, 7, -1, 3}, {6})), -1);
         return std::vector<Out>{{"dweight", dweight, kF32Tol}};
       }});
  c.push_back({"dropout_forward", "flat", [](const Backend& b) {
                 return std::vector<Out>{{"y", dropout_forward(b.elem(random({1003}, 59)), 0.1, 7, 3), b.tol()}};
               }});
  return c;
}

// Logits [37, 101] with ignored rows, label smoothing 0.1.
struct XentInputs {
  Tensor logits = random({37, 101}, 60, -4, 4), targets;
  XentInputs() {
    std::vector<std::int32_t> t(37);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = i % 5 == 4 ? -100 : static_cast<std::int32_t>((i * 13) % 101);
    targets = ids_tensor(t, {37});
  }
};

std::vector<OpCase> cross_entropy_cases() {
  std::vector<OpCase> c;
  c.push_back({"cross_entropy_forward", "ignored_rows", [](const Backend& b) {
                 const XentInputs in;
                 const auto f = cross_entropy_forward(b.elem(in.logits), b.ids(in.targets), 0.1, -100);
                 return std::vector<Out>{{"loss", f.loss, kF32Tol}, {"lse", f.lse, kF32Tol}, {"nll", f.nll, kF32Tol}};
               }});
  c.push_back({"cross_entropy_backward", "ignored_rows", [](const Backend& b) {
                 const XentInputs in;
                 const Tensor logits = as_input(in.logits, b.dtype);
                 const Tensor lse = cross_entropy_forward(logits, in.targets, 0.1, -100).lse;  // CPU's, for both
                 const Tensor d = cross_entropy_backward(b.f32(random({37}, 61)), b.elem(logits), b.ids(in.targets),
                                                         b.f32(lse), 0.1, -100);
                 return std::vector<Out>{{"dlogits", d, b.tol()}};
               }});
  // The columns [40, 70) of the 101-token vocabulary: targets inside, outside and ignored.
  c.push_back(
      {"cross_entropy_shard_stats", "vocabulary_block", [](const Backend& b) {
         const XentInputs in;
         const Tensor stats = cross_entropy_shard_stats(b.elem(random({37, 30}, 64, -4, 4)), b.ids(in.targets), 40);
         return std::vector<Out>{{"stats", stats, kF32Tol}};
       }});
  c.push_back({"cross_entropy_shard_backward", "vocabulary_block", [](const Backend& b) {
                 const XentInputs in;
                 const Tensor d =
                     cross_entropy_shard_backward(b.f32(random({37}, 65)), b.elem(random({37, 30}, 66, -4, 4)),
                                                  b.ids(in.targets), b.f32(random({37}, 67, 3, 5)), 0.1, -100, 40, 101);
                 return std::vector<Out>{{"dlogits", d, b.tol()}};
               }});
  c.push_back({"cross_entropy_with_grad", "ignored_rows", [](const Backend& b) {
                 const XentInputs in;
                 const auto r = cross_entropy_with_grad(b.elem(in.logits), b.ids(in.targets), 0.1, -100);
                 return std::vector<Out>{{"loss", r.out.loss, kF32Tol}, {"dlogits", r.dlogits, b.tol()}};
               }});
  return c;
}

// q [2, 2, lq, d], k and v [2, 2, lk, d]; the second sequence's last three keys padded.
struct AttentionInputs {
  Tensor q, k, v, pad;
  AttentionOptions opt;
  AttentionInputs(const Backend& b, std::int64_t lq, std::int64_t lk, std::int64_t d, bool causal, bool padded)
      : q(b.elem(random({2, 2, lq, d}, 70))),
        k(b.elem(random({2, 2, lk, d}, 71))),
        v(b.elem(random({2, 2, lk, d}, 72))),
        opt{.causal = causal, .scale = 0.0} {
    std::vector<std::int32_t> p(static_cast<std::size_t>(2 * lk), 0);
    for (std::int64_t j = lk - 3; padded && j < lk; ++j) p[static_cast<std::size_t>(lk + j)] = 1;
    if (padded) pad = b.ids(ids_tensor(p, {2, lk}));
  }
};

// Tolerances of attention: float32 exact; bfloat16 (FlashAttention's bfloat16 P V and dS rounding,
// tests/gpu/test_kernels_cuda.cpp): lse 1e-3, gradients 4e-2; float32 on the TF32 tensor cores:
// kTf32Attention*Tol.
struct AttentionTols {
  double out, lse, grad;
};

AttentionTols attention_tols(const Backend& b, bool tf32) {
  if (tf32) return {kTf32AttentionTol, kTf32AttentionTol, kTf32AttentionGradTol};
  const bool f32 = b.dtype == DType::f32;
  return {b.tol(), f32 ? kF32Tol : 10 * kF32Tol, f32 ? kF32Tol : 2 * kBf16Tol};
}

// train.tf32 for the GPU's float32 attention while a case runs (the CPU twin stays exact).
struct ScopedTf32 {
  explicit ScopedTf32(bool on) { set_allow_tf32(on); }
  ~ScopedTf32() { set_allow_tf32(false); }
  ScopedTf32(const ScopedTf32&) = delete;
  ScopedTf32& operator=(const ScopedTf32&) = delete;
};

// q [2, 2, lq, d], k and v [2, 2, lk, d]; tf32: float32 only, with train.tf32 on.
struct AttentionFamily {
  const char* name;
  std::int64_t lq, lk, d;
  bool causal, padded, tf32;
};

void add_attention_cases(std::vector<OpCase>& c, const AttentionFamily& fam) {
  c.push_back({"attention_forward", fam.name,
               [fam](const Backend& b) {
                 const ScopedTf32 tf32(fam.tf32);
                 const AttentionInputs in(b, fam.lq, fam.lk, fam.d, fam.causal, fam.padded);
                 const auto f = attention_forward(in.q, in.k, in.v, in.pad, in.opt);
                 const AttentionTols tol = attention_tols(b, fam.tf32);
                 return std::vector<Out>{{"out", f.out, tol.out}, {"lse", f.lse, tol.lse}};
               },
               fam.tf32});
  c.push_back({"attention_backward", fam.name,
               [fam](const Backend& b) {
                 const ScopedTf32 tf32(fam.tf32);
                 const AttentionInputs in(b, fam.lq, fam.lk, fam.d, fam.causal, fam.padded);
                 const auto f = attention_forward(in.q, in.k, in.v, in.pad, in.opt);
                 const auto g =
                     attention_backward(b.elem(random({2, 2, fam.lq, fam.d}, 73)), in.q, in.k, in.v, in.pad, f, in.opt);
                 const double tol = attention_tols(b, fam.tf32).grad;
                 return std::vector<Out>{{"dq", g.dq, tol}, {"dk", g.dk, tol}, {"dv", g.dv, tol}};
               },
               fam.tf32});
}

// A decoder step over a preallocated key/value cache: q [2, 2, lq, d], k and v [2, 2, capacity, d]
// of which the first key_length positions are keys (the rest NaN: a kernel that reads past
// key_length, or multiplies a zero weight by them, fails), key_padding [2, key_length].
struct CacheFamily {
  const char* name;
  std::int64_t lq, capacity, key_length, d;
};

OpCase attention_cache_case(const CacheFamily& fam) {
  return {"attention_forward", fam.name, [fam](const Backend& b) {
            Tensor k = random({2, 2, fam.capacity, fam.d}, 74), v = random({2, 2, fam.capacity, fam.d}, 75);
            for (Tensor* t : {&k, &v})
              for (std::int64_t bh = 0; bh < 4; ++bh)
                std::fill_n(t->data<float>() + (bh * fam.capacity + fam.key_length) * fam.d,
                            (fam.capacity - fam.key_length) * fam.d, std::nanf(""));
            std::vector<std::int32_t> p(static_cast<std::size_t>(2 * fam.key_length), 0);
            p[static_cast<std::size_t>(2 * fam.key_length - 1)] = 1;  // the second sequence's last key
            const AttentionOptions opt{.causal = false, .scale = 0.0, .key_length = fam.key_length};
            const auto f = attention_forward(b.elem(random({2, 2, fam.lq, fam.d}, 76)), b.elem(k), b.elem(v),
                                             b.ids(ids_tensor(p, {2, fam.key_length})), opt);
            const AttentionTols tol = attention_tols(b, false);
            return std::vector<Out>{{"out", f.out, tol.out}, {"lse", f.lse, tol.lse}};
          }};
}

// Beams sharing their sentence's cross-attention rows: q [3, 2, 1, 32] reads rows 1, 0, 1 of k and
// v [2, 2, 11, 32] (opt.kv_rows, on the host); the GPU gathers those rows before its kernel.
OpCase attention_kv_rows_case() {
  return {"attention_forward", "cache_kv_rows", [](const Backend& b) {
            std::vector<std::int32_t> p(22, 0);
            p[21] = 1;  // the second sentence's last key
            const AttentionOptions opt{.causal = false,
                                       .scale = 0.0,
                                       .key_length = 0,
                                       .kv_rows = ids_tensor(std::vector<std::int32_t>{1, 0, 1}, {3})};
            const auto f = attention_forward(b.elem(random({3, 2, 1, 32}, 77)), b.elem(random({2, 2, 11, 32}, 78)),
                                             b.elem(random({2, 2, 11, 32}, 79)), b.ids(ids_tensor(p, {2, 11})), opt);
            const AttentionTols tol = attention_tols(b, false);
            return std::vector<Out>{{"out", f.out, tol.out}, {"lse", f.lse, tol.lse}};
          }};
}

std::vector<OpCase> attention_and_adam_cases() {
  std::vector<OpCase> c;
  // d 64 and 128 in bfloat16 (and float32 under tf32) run the FlashAttention-2 kernels
  // (attention_fa2.cu): the long families span several query blocks and key tiles (its cp.async
  // double buffering), with ragged lengths (neither a multiple of the 64-row tiles) and Lq != Lk
  // under the causal mask.
  for (const AttentionFamily& fam : {AttentionFamily{"cross_padded", 9, 13, 32, false, true, false},
                                     AttentionFamily{"self_causal", 16, 16, 32, true, false, false},
                                     AttentionFamily{"d64_cross_padded", 9, 13, 64, false, true, false},
                                     AttentionFamily{"d128_self_causal", 16, 16, 128, true, false, false},
                                     AttentionFamily{"d64_long_causal_padded", 130, 200, 64, true, true, false},
                                     AttentionFamily{"d128_long_ragged_padded", 100, 150, 128, false, true, false},
                                     AttentionFamily{"d128_long_causal", 67, 100, 128, true, false, false},
                                     AttentionFamily{"tf32_d64_long_causal_padded", 130, 200, 64, true, true, true},
                                     AttentionFamily{"tf32_d128_ragged_padded", 100, 75, 128, false, true, true}})
    add_attention_cases(c, fam);
  // A decoder cache: d 32 on attention.cu's kernel, 64 and 128 (several key tiles) on FA2's in bf16.
  for (const CacheFamily& fam :
       {CacheFamily{"cache_d32", 3, 24, 9, 32}, CacheFamily{"cache_d64_one_query", 1, 40, 17, 64},
        CacheFamily{"cache_d128_long", 5, 150, 130, 128}})
    c.push_back(attention_cache_case(fam));
  c.push_back(attention_kv_rows_case());
  // Bit-identical (no fused multiply-add on the GPU side); float32 only.
  c.push_back({"adam_update", "two_params",
               [](const Backend& b) {
                 std::vector<AdamParam> params;
                 for (std::int64_t n : {300, 4097})
                   params.push_back({b.f32(random({n}, 80)), b.f32(random({n}, 81)), b.f32(random({n}, 82)),
                                     b.f32(random({n}, 83, 0.0, 1.0)), Tensor()});
                 adam_update(params, {1e-3, 0.9, 0.98, 1e-9, 3});
                 std::vector<Out> r;
                 for (const AdamParam& p : params)
                   for (const Tensor& t : {p.weight, p.exp_avg, p.exp_avg_sq}) r.push_back({"state", t, 0.0});
                 return r;
               },
               true});
  // With the kept bfloat16 copies (mixed precision) written in the same pass: bit-identical too.
  c.push_back({"adam_update", "with_bf16_copies",
               [](const Backend& b) {
                 std::vector<AdamParam> params;
                 for (std::int64_t n : {300, 4097})
                   params.push_back({b.f32(random({n}, 84)), b.f32(random({n}, 85)), b.f32(random({n}, 86)),
                                     b.f32(random({n}, 87, 0.0, 1.0)), Tensor::zeros({n}, DType::bf16, b.device)});
                 adam_update(params, {1e-3, 0.9, 0.98, 1e-9, 2});
                 std::vector<Out> r;
                 for (const AdamParam& p : params)
                   for (const Tensor& t : {p.weight, p.weight_bf16}) r.push_back({"state", t, 0.0});
                 return r;
               },
               true});
  return c;
}

// beam_topk's (score, index) pairs as float32 values that hold them exactly: the index, the
// score's float32 rounding and what that rounding left, so a tolerance of 0 checks the double.
std::vector<Out> beam_candidates(const Tensor& pairs) {
  const Tensor p = pairs.to(Device::cpu);
  const std::int64_t n = p.numel() / 2;
  Tensor index = Tensor::empty({n}, DType::f32), hi = Tensor::empty({n}, DType::f32),
         lo = Tensor::empty({n}, DType::f32);
  for (std::int64_t i = 0; i < n; ++i) {
    const double score = p.data<double>()[2 * i];
    index.data<float>()[i] = static_cast<float>(p.data<double>()[2 * i + 1]);
    hi.data<float>()[i] = static_cast<float>(score);
    lo.data<float>()[i] =
        std::isinf(score) ? 0.0f : static_cast<float>(score - static_cast<double>(hi.data<float>()[i]));
  }
  return {{"index", index, 0.0}, {"score", hi, 0.0}, {"score rest", lo, 0.0}};
}

// Four sentences of beam 3 over 300 ids: log-probabilities on a grid of 1/8 (ties within a row and,
// with equal beam scores, across beams), a dead beam, a sentence with room only for eos, one
// whose beams are all dead (no candidate: -1 indices), more candidates asked than a row has.
std::vector<OpCase> beam_search_cases() {
  std::vector<OpCase> c;
  for (const std::int64_t count : {6, 700})
    c.push_back({"beam_topk", count == 6 ? "ties_dead_beams_eos_only" : "fewer_candidates_than_count",
                 [count](const Backend& b) {
                   Tensor logp = random({12, 300}, 90, -6, 0);
                   for (std::int64_t i = 0; i < logp.numel(); ++i)
                     logp.data<float>()[i] = std::round(logp.data<float>()[i] * 8) / 8;
                   const double inf = std::numeric_limits<double>::infinity();
                   const Tensor scores = Tensor::from(
                       std::vector<double>{-1.5, -1.5, -2.0, 0.0, -inf, -inf, -0.25, -3.0, -0.5, -inf, -inf, -inf},
                       {12});
                   const Tensor eos_only = ids_tensor({0, 0, 1, 0}, {4});
                   const BeamTopKOptions opt{.beam = 3, .count = count, .eos = 3, .never_output = {0, 2}};
                   return beam_candidates(beam_topk(b.elem(logp), scores, eos_only, opt));
                 },
                 true});
  // Logits in: the GPU takes their log-softmax first, the CPU row by row (within float32 rounding).
  c.push_back(
      {"beam_topk", "of_logits",
       [](const Backend& b) {
         const Tensor logits = random({6, 300}, 91, -4, 4);
         const Tensor scores = Tensor::from(std::vector<double>{-1.5, -1.0, -2.0, 0.0, -0.5, -0.75}, {6});
         const BeamTopKOptions opt{.beam = 2, .count = 4, .eos = 3, .never_output = {0, 2}, .logits = true};
         std::vector<Out> out = beam_candidates(beam_topk(b.elem(logits), scores, ids_tensor({0, 1, 0}, {3}), opt));
         for (Out& o : out) o.tol = o.what == "index" ? 0.0 : 1e-5;
         return out;
       },
       true});
  return c;
}

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> all;
    for (auto make : {elementwise_cases, gemm_and_layout_cases, reduction_cases, layer_norm_embedding_dropout_cases,
                      cross_entropy_cases, attention_and_adam_cases, beam_search_cases})
      for (OpCase& c : make()) all.push_back(std::move(c));
    return all;
  }();
  return cases;
}

#define TESSERA_OP_NAME(op) #op,
const std::vector<std::string> kOps{TESSERA_KERNEL_OPS(TESSERA_OP_NAME)};
#undef TESSERA_OP_NAME

std::vector<DType> dtypes_of(const OpCase& c) {
  return c.f32_only ? std::vector<DType>{DType::f32} : std::vector<DType>{DType::f32, DType::bf16};
}

class BackendOps : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendOps, CudaMatchesCpu) {
  std::vector<const OpCase*> cases;
  for (const OpCase& c : all_cases())
    if (c.op == GetParam()) cases.push_back(&c);
  ASSERT_FALSE(cases.empty()) << "op '" << GetParam() << "' is in kernels/ops.h but has no case in "
                              << "tests/backend_ops/test_backend_ops.cpp: every op needs a twin test";
  for (const OpCase* c : cases)  // every case runs on the CPU, on every build
    for (DType dt : dtypes_of(*c)) EXPECT_NO_THROW(c->run({Device::cpu, dt})) << c->family << " " << dtype_label(dt);
  SKIP_WITHOUT_GPU();
  for (const OpCase* c : cases)
    for (DType dt : dtypes_of(*c)) {
      const std::vector<Out> cpu = c->run({Device::cpu, dt}), gpu = c->run({Device::cuda, dt});
      ASSERT_EQ(cpu.size(), gpu.size());
      for (std::size_t i = 0; i < cpu.size(); ++i)
        expect_close(gpu[i].value, cpu[i].value, gpu[i].tol,
                     GetParam() + " " + c->family + " " + dtype_label(dt) + " " + gpu[i].what);
    }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, BackendOps, ::testing::ValuesIn(kOps),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// A case for an op that is not in the list (a typo, or an op dropped from dispatch.h) fails too.
TEST(BackendOpsList, EveryCaseNamesAListedOp) {
  for (const OpCase& c : all_cases())
    EXPECT_NE(std::find(kOps.begin(), kOps.end(), c.op), kOps.end()) << "case for unknown op '" << c.op << "'";
}

}  // namespace
}  // namespace tessera
