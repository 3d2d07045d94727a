#include "kernels/cpu/gemm_bf16.h"

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
  const GemmKey key{trans_a, trans_b, m, n, k, lda, stride_a, ldb, stride_b, ldc, stride_c, batch, alpha, beta};
  run_plan(plan_for(key), a, b, c);
}

}  // namespace tessera::cpu
