#include "kernels/cpu/gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <list>
#include <oneapi/dnnl/dnnl.hpp>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;

std::atomic<bool> use_bf16{false};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One GEMM's shape, operand layout and scalars: what a plan is made for.
struct GemmKey {
  bool ta, tb;
  std::int64_t m, n, k, lda, sa, ldb, sb, ldc, sc, batch;
  float alpha, beta;
  auto tie() const { return std::tie(ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch, alpha, beta); }
  bool operator==(const GemmKey& o) const { return tie() == o.tie(); }
};

struct GemmKeyHash {
  std::size_t operator()(const GemmKey& key) const {
    std::size_t h = std::hash<bool>()(key.ta) * 2 + std::hash<bool>()(key.tb);
    for (std::int64_t v : {key.m, key.n, key.k, key.lda, key.sa, key.ldb, key.sb, key.ldc, key.sc, key.batch})
      h = h * 1000003u ^ std::hash<std::int64_t>()(v);
    return h * 1000003u ^ std::hash<float>()(key.alpha) ^ (std::hash<float>()(key.beta) << 1);
  }
};

// The float32 view [batch, rows, cols] of op(X) for a row-major X with leading dimension `ld`
// (X^T when `trans`: element (r, c) at c * ld + r). A batch of 1 gets a dense batch stride, which
// oneDNN checks even though nothing steps along it.
memory::desc f32_view(std::int64_t batch, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t stride,
                      bool trans) {
  const std::int64_t batch_stride = batch == 1 ? rows * cols * ld : stride;
  const Dims strides = trans ? Dims{batch_stride, 1, ld} : Dims{batch_stride, ld, 1};
  return memory::desc(Dims{batch, rows, cols}, memory::data_type::f32, strides);
}

// The primitives of one GEMM shape: two reorders that round the float32 operands into the
// bfloat16 layouts the matmul asked for, and the matmul with alpha and beta folded in.
struct GemmPlan {
  memory::desc a_f32, b_f32, a_bf16, b_bf16, c_f32;
  dnnl::reorder round_a, round_b;
  dnnl::matmul matmul;
};

dnnl::matmul::primitive_desc matmul_desc(const memory::desc& a, const memory::desc& b, const memory::desc& c,
                                         float alpha, float beta) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return {dnnl::matmul::desc(a, b, c), attr, cpu_engine()};
}

GemmPlan make_plan(const GemmKey& key) {
  GemmPlan plan;
  const std::int64_t batch_b = key.sb == 0 ? 1 : key.batch;  // one shared B broadcasts over the batch
  plan.a_f32 = f32_view(key.batch, key.m, key.k, key.lda, key.sa, key.ta);
  plan.b_f32 = f32_view(batch_b, key.k, key.n, key.ldb, key.sb, key.tb);
  plan.c_f32 = memory::desc(Dims{key.batch, key.m, key.n}, memory::data_type::f32,
                            Dims{key.batch == 1 ? key.m * key.ldc : key.sc, key.ldc, 1});
  const auto any = memory::format_tag::any;
  const memory::desc a_any(Dims{key.batch, key.m, key.k}, memory::data_type::bf16, any);
  const memory::desc b_any(Dims{batch_b, key.k, key.n}, memory::data_type::bf16, any);
  const auto pd = matmul_desc(a_any, b_any, plan.c_f32, key.alpha, key.beta);
  plan.a_bf16 = pd.src_desc();
  plan.b_bf16 = pd.weights_desc();
  plan.round_a = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plan.a_f32, cpu_engine(), plan.a_bf16));
  plan.round_b = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plan.b_f32, cpu_engine(), plan.b_bf16));
  plan.matmul = dnnl::matmul(pd);
  return plan;
}

// The plans of the most recently used shapes, per thread (GEMMs may run inside OpenMP loops). A
// training step's token count changes the shapes from batch to batch; a plan costs about 1.5 ms to
// make and 130 KB to keep, so the least recently used go when there are more than 1024.
class PlanCache {
 public:
  const GemmPlan& get(const GemmKey& key) {
    if (auto it = plans_.find(key); it != plans_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
    if (plans_.size() >= kCapacity) {
      plans_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(key);
    return plans_.emplace(key, std::make_pair(make_plan(key), order_.begin())).first->second.first;
  }

 private:
  static constexpr std::size_t kCapacity = 1024;
  std::list<GemmKey> order_;  // most recent first
  std::unordered_map<GemmKey, std::pair<GemmPlan, std::list<GemmKey>::iterator>, GemmKeyHash> plans_;
};

const GemmPlan& plan_for(const GemmKey& key) {
  thread_local PlanCache cache;
  return cache.get(key);
}

// Grows a per-thread buffer to `bytes` and returns it.
void* scratch(std::vector<std::byte>& buffer, std::size_t bytes) {
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

void run_plan(const GemmPlan& plan, const float* a, const float* b, float* c) {
  thread_local std::vector<std::byte> a_buffer, b_buffer;
  dnnl::engine& engine = cpu_engine();
  dnnl::stream stream(engine);
  memory a_f32(plan.a_f32, engine, const_cast<float*>(a));  // read only: the reorder's source
  memory b_f32(plan.b_f32, engine, const_cast<float*>(b));
  memory a_bf16(plan.a_bf16, engine, scratch(a_buffer, plan.a_bf16.get_size()));
  memory b_bf16(plan.b_bf16, engine, scratch(b_buffer, plan.b_bf16.get_size()));
  memory c_f32(plan.c_f32, engine, c);
  plan.round_a.execute(stream, a_f32, a_bf16);
  plan.round_b.execute(stream, b_f32, b_bf16);
  plan.matmul.execute(stream, {{DNNL_ARG_SRC, a_bf16}, {DNNL_ARG_WEIGHTS, b_bf16}, {DNNL_ARG_DST, c_f32}});
  stream.wait();
}

// ---- One GEMM in pieces of a few fixed shapes ----
// A training step's token count changes from batch to batch, and it is the row count M of the
// forward and input-gradient GEMMs and the depth K of the weight-gradient GEMMs. Every new shape
// costs a plan (about 1.5 ms and up to 1 MB), so M and K are cut into pieces of a few sizes: whole
// chunks, a multiple of kPad, and a tail shorter than kPad run padded with zeros.
constexpr std::int64_t kRowChunk = 512;     // rows of C per call
constexpr std::int64_t kDepthChunk = 2048;  // products summed per call
constexpr std::int64_t kPad = 32;

// C = alpha * op(A) op(B) + beta * C, one matrix each (row-major, leading dimensions lda, ldb, ldc).
struct Gemm {
  bool ta, tb;
  std::int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float* a;
  const float* b;
  float* c;

  float a_at(std::int64_t i, std::int64_t l) const { return ta ? a[l * lda + i] : a[i * lda + l]; }
  float b_at(std::int64_t l, std::int64_t j) const { return tb ? b[j * ldb + l] : b[l * ldb + j]; }
  Gemm rows(std::int64_t first, std::int64_t count) const {  // rows [first, first + count) of C
    Gemm g = *this;
    g.m = count;
    g.a = ta ? a + first : a + first * lda;
    g.c = c + first * ldc;
    return g;
  }
  Gemm depth(std::int64_t first, std::int64_t count, float beta_here) const {  // products [first, +count)
    Gemm g = *this;
    g.k = count;
    g.beta = beta_here;
    g.a = ta ? a + first * lda : a + first;
    g.b = tb ? b + first : b + first * ldb;
    return g;
  }
};

void run_exact(const Gemm& g) {
  const GemmKey key{g.ta, g.tb, g.m, g.n, g.k, g.lda, 0, g.ldb, 0, g.ldc, 0, 1, g.alpha, g.beta};
  run_plan(plan_for(key), g.a, g.b, g.c);
}

// [first, length) pieces of `total`: whole chunks, then a multiple of kPad, then the tail.
std::vector<std::pair<std::int64_t, std::int64_t>> pieces(std::int64_t total, std::int64_t chunk) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t first = 0;
  for (; total - first >= chunk; first += chunk) out.emplace_back(first, chunk);
  if (const std::int64_t middle = (total - first) / kPad * kPad; middle > 0) {
    out.emplace_back(first, middle);
    first += middle;
  }
  if (first < total) out.emplace_back(first, total - first);
  return out;
}

// A depth shorter than kPad: both operands copied with zeros up to kPad products.
void run_depth_tail(const Gemm& g) {
  thread_local std::vector<float> a_pad, b_pad;
  a_pad.assign(static_cast<std::size_t>(g.m * kPad), 0.0f);
  b_pad.assign(static_cast<std::size_t>(kPad * g.n), 0.0f);
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t l = 0; l < g.k; ++l) a_pad[static_cast<std::size_t>(i * kPad + l)] = g.a_at(i, l);
  for (std::int64_t l = 0; l < g.k; ++l)
    for (std::int64_t j = 0; j < g.n; ++j) b_pad[static_cast<std::size_t>(l * g.n + j)] = g.b_at(l, j);
  run_exact({false, false, g.m, g.n, kPad, kPad, g.n, g.ldc, g.alpha, g.beta, a_pad.data(), b_pad.data(), g.c});
}

// The depth in pieces: the first adds beta * C, the others add to what it wrote.
void run_depth_pieces(const Gemm& g) {
  float beta = g.beta;
  for (const auto& [first, count] : pieces(g.k, kDepthChunk)) {
    const Gemm piece = g.depth(first, count, beta);
    if (count < kPad) {
      run_depth_tail(piece);
    } else {
      run_exact(piece);
    }
    beta = 1.0f;
  }
}

// Fewer rows than kPad: op(A)'s rows and C's copied with zeros up to kPad rows, and C's copied back.
void run_row_tail(const Gemm& g) {
  thread_local std::vector<float> a_pad, c_pad;
  a_pad.assign(static_cast<std::size_t>(kPad * g.k), 0.0f);
  c_pad.assign(static_cast<std::size_t>(kPad * g.n), 0.0f);
  for (std::int64_t i = 0; i < g.m; ++i) {
    for (std::int64_t l = 0; l < g.k; ++l) a_pad[static_cast<std::size_t>(i * g.k + l)] = g.a_at(i, l);
    std::copy_n(g.c + i * g.ldc, g.n, c_pad.data() + i * g.n);
  }
  Gemm padded = g;
  padded.ta = false;
  padded.m = kPad;
  padded.a = a_pad.data();
  padded.lda = g.k;
  padded.c = c_pad.data();
  padded.ldc = g.n;
  run_depth_pieces(padded);
  for (std::int64_t i = 0; i < g.m; ++i) std::copy_n(c_pad.data() + i * g.n, g.n, g.c + i * g.ldc);
}

void run_in_pieces(const Gemm& g) {
  for (const auto& [first, count] : pieces(g.m, kRowChunk)) {
    if (count < kPad) {
      run_row_tail(g.rows(first, count));
    } else {
      run_depth_pieces(g.rows(first, count));
    }
  }
}

}  // namespace

void set_bf16_matmul(bool on) { use_bf16.store(on); }
bool bf16_matmul() { return use_bf16.load(); }

std::string bf16_matmul_kernel() {
  static const std::string name = [] {
    const memory::desc a(Dims{1, 64, 64}, memory::data_type::bf16, memory::format_tag::any);
    const memory::desc c(Dims{1, 64, 64}, memory::data_type::f32, memory::format_tag::abc);
    return std::string(matmul_desc(a, a, c, 1.0f, 0.0f).impl_info_str());
  }();
  return name;
}

bool bf16_matmul_native() {
  const std::string name = bf16_matmul_kernel();
  return name.find("amx") != std::string::npos || name.find("bf16") != std::string::npos;
}

void gemm_bf16_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                               const float* a, std::int64_t lda, std::int64_t stride_a, const float* b,
                               std::int64_t ldb, std::int64_t stride_b, float beta, float* c, std::int64_t ldc,
                               std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (stride_c == 0 && batch > 1) {  // every batch accumulates into one C: one after another
    for (std::int64_t i = 0; i < batch; ++i)
      gemm_bf16_strided_batched(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, 0, b + i * stride_b, ldb, 0,
                                beta, c, ldc, 0, 1);
    return;
  }
  if (stride_a == 0 && batch > 1) {  // a shared A: oneDNN broadcasts only B, so run the batches alone
    for (std::int64_t i = 0; i < batch; ++i)
      gemm_bf16_strided_batched(trans_a, trans_b, m, n, k, alpha, a, lda, 0, b + i * stride_b, ldb, 0, beta,
                                c + i * stride_c, ldc, 0, 1);
    return;
  }
  if (batch == 1) {
    run_in_pieces({trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c});
    return;
  }
  const GemmKey key{trans_a, trans_b, m, n, k, lda, stride_a, ldb, stride_b, ldc, stride_c, batch, alpha, beta};
  run_plan(plan_for(key), a, b, c);
}

}  // namespace tessera::cpu
