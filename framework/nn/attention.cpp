#include "nn/attention.h"

#include <algorithm>
#include <cstring>

#include "autograd/ops.h"
#include "kernels/dispatch.h"

namespace tessera::nn {

KeyValueCache::KeyValueCache(const Tensor& k, const Tensor& v)
    : k_(k), v_(v), fixed_(true), rows_(k.size(0)), length_(k.size(2)), capacity_(k.size(2)) {}

void KeyValueCache::map_rows(const std::vector<std::int64_t>& rows) {
  std::vector<std::int32_t> map(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    TESSERA_CHECK(rows[i] >= 0 && rows[i] < rows_, "key/value cache: row {} of {} selected", rows[i], rows_);
    const auto r = static_cast<std::size_t>(rows[i]);
    map[i] = row_map_.defined() ? row_map_.data<std::int32_t>()[r] : static_cast<std::int32_t>(r);
  }
  row_map_ = Tensor::from(map, {static_cast<std::int64_t>(map.size())});
  rows_ = static_cast<std::int64_t>(rows.size());
}

void KeyValueCache::grow(std::int64_t rows, std::int64_t capacity) {
  Shape shape = k_.shape();
  shape[0] = rows;
  shape[2] = capacity;
  const Tensor k = Tensor::empty(shape, k_.dtype(), k_.device()), v = Tensor::empty(shape, v_.dtype(), v_.device());
  kernels::copy_time_range(k, 0, keys(), {}, 0, length_);
  kernels::copy_time_range(v, 0, values(), {}, 0, length_);
  k_ = k;
  v_ = v;
  k_spare_ = v_spare_ = Tensor();
  capacity_ = capacity;
}

namespace {
// A step's keys [rows, H, 1, dk] as one run of rows * H positions of dk, and a step-major buffer's
// steps as runs of rows held * H: copy_time_range copies between them.
Tensor as_run(const Tensor& t) { return t.reshape({1, 1, t.numel() / t.size(-1), t.size(-1)}); }
}  // namespace

void KeyValueCache::start_step_major(const Tensor& k_new) {
  step_major_ = true;
  rows_ = k_new.size(0);
  capacity_ = std::max<std::int64_t>(capacity_, 1);
  k_ = Tensor::empty({capacity_, rows_, k_new.size(1), k_new.size(3)}, k_new.dtype());
  v_ = Tensor::empty(k_.shape(), k_new.dtype());
  lineage_ = Tensor::empty({rows_, capacity_}, DType::i32);
}

void KeyValueCache::resize_step_major(std::int64_t rows, std::int64_t capacity) {
  const std::int64_t step = k_.numel() / k_.size(0), new_step = rows * k_.size(2) * k_.size(3);
  const Tensor k = Tensor::empty({capacity, rows, k_.size(2), k_.size(3)}, k_.dtype());
  const Tensor v = Tensor::empty(k.shape(), v_.dtype());
  const std::int64_t dk = k_.size(3), copied = std::min(step, new_step) / dk;
  for (std::int64_t t = 0; t < length_; ++t) {
    kernels::copy_time_range(as_run(k), t * new_step / dk, as_run(k_), {}, t * step / dk, copied);
    kernels::copy_time_range(as_run(v), t * new_step / dk, as_run(v_), {}, t * step / dk, copied);
  }
  Tensor lineage = Tensor::empty({rows, capacity}, DType::i32);
  for (std::int64_t r = 0; r < std::min(rows, lineage_.size(0)); ++r)
    std::copy_n(lineage_.data<std::int32_t>() + r * lineage_.size(1), length_,
                lineage.data<std::int32_t>() + r * capacity);
  k_ = k;
  v_ = v;
  lineage_ = lineage;
  capacity_ = capacity;
}

void KeyValueCache::append_step_major(const Tensor& k_new, const Tensor& v_new) {
  if (length_ == capacity_) resize_step_major(k_.size(1), 2 * capacity_);
  const std::int64_t runs = rows_ * k_.size(2), step = k_.size(1) * k_.size(2);
  kernels::copy_time_range(as_run(k_), length_ * step, as_run(k_new), {}, 0, runs);
  kernels::copy_time_range(as_run(v_), length_ * step, as_run(v_new), {}, 0, runs);
  for (std::int64_t r = 0; r < rows_; ++r)
    lineage_.data<std::int32_t>()[r * capacity_ + length_] = static_cast<std::int32_t>(r);
  ++length_;
}

// A row's history is its lineage: reordering copies length() ints a row, no keys.
void KeyValueCache::select_rows_step_major(const std::vector<std::int64_t>& rows) {
  const auto n = static_cast<std::int64_t>(rows.size());
  if (n > k_.size(1)) resize_step_major(n, capacity_);  // more rows than a step holds (a beam's first expansion)
  Tensor lineage = Tensor::empty(lineage_.shape(), DType::i32);
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t from = rows[static_cast<std::size_t>(r)];
    TESSERA_CHECK(from >= 0 && from < rows_, "key/value cache: row {} of {} selected", from, rows_);
    std::copy_n(lineage_.data<std::int32_t>() + from * capacity_, length_,
                lineage.data<std::int32_t>() + r * capacity_);
  }
  lineage_ = lineage;
  rows_ = n;
}

Tensor KeyValueCache::history(bool values) const {
  const Tensor& buffer = values ? v_ : k_;
  if (!step_major_) {
    Shape shape = buffer.shape();
    shape[0] = rows_;
    shape[2] = length_;
    Tensor out = Tensor::empty(shape, buffer.dtype(), buffer.device());
    kernels::copy_time_range(
        out, 0, buffer,
        row_map_.defined() ? kernels::kv_row_indices(row_map_, rows_, buffer.size(0)) : std::vector<std::int64_t>{}, 0,
        length_);
    return out.to(Device::cpu);
  }
  const std::int64_t heads = buffer.size(2), dk = buffer.size(3), held = buffer.size(1);
  Tensor out = Tensor::empty({rows_, heads, length_, dk}, buffer.dtype());
  const std::size_t elem = dtype_size(buffer.dtype());
  for (std::int64_t r = 0; r < rows_; ++r)
    for (std::int64_t t = 0; t < length_; ++t)
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t from = lineage_.data<std::int32_t>()[r * capacity_ + t];
        std::memcpy(
            static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(((r * heads + h) * length_ + t) * dk) * elem,
            static_cast<const char*>(buffer.raw_data()) +
                static_cast<std::size_t>(((t * held + from) * heads + h) * dk) * elem,
            static_cast<std::size_t>(dk) * elem);
      }
  return out;
}

void KeyValueCache::append(const Tensor& k_new, const Tensor& v_new) {
  TESSERA_CHECK(!fixed_, "key/value cache: the memory's keys and values take no new positions");
  if (!k_.defined() && k_new.device() == Device::cpu) start_step_major(k_new);
  if (step_major_) {
    TESSERA_CHECK(k_new.size(0) == rows_, "key/value cache: a step of {} rows for a cache of {}", k_new.size(0), rows_);
    append_step_major(k_new, v_new);
    return;
  }
  if (!k_.defined()) {
    Shape shape = k_new.shape();
    shape[2] = std::max<std::int64_t>(capacity_, 1);
    k_ = Tensor::empty(shape, k_new.dtype(), k_new.device());
    v_ = Tensor::empty(shape, v_new.dtype(), v_new.device());
    rows_ = k_new.size(0);
    capacity_ = shape[2];
  }
  TESSERA_CHECK(k_new.size(0) == rows_, "key/value cache: a step of {} rows for a cache of {}", k_new.size(0), rows_);
  if (length_ == capacity_) grow(k_.size(0), 2 * capacity_);
  kernels::copy_time_range(k_, length_, k_new, {}, 0, 1);
  kernels::copy_time_range(v_, length_, v_new, {}, 0, 1);
  ++length_;
}

void KeyValueCache::select_rows(const std::vector<std::int64_t>& rows) {
  if (!k_.defined()) return;  // nothing written yet: the first step sets the rows
  if (fixed_ && k_.device() == Device::cpu) {
    map_rows(rows);
    return;
  }
  if (step_major_) {
    select_rows_step_major(rows);
    return;
  }
  const auto n = static_cast<std::int64_t>(rows.size());
  bool prefix = n <= rows_;
  for (std::int64_t r = 0; prefix && r < n; ++r) prefix = rows[static_cast<std::size_t>(r)] == r;
  if (!prefix) {
    if (n > k_.size(0)) grow(n, capacity_);  // more rows than the buffers hold (a beam's first expansion)
    if (!k_spare_.defined()) {
      k_spare_ = Tensor::empty(k_.shape(), k_.dtype(), k_.device());
      v_spare_ = Tensor::empty(v_.shape(), v_.dtype(), v_.device());
    }
    kernels::copy_time_range(k_spare_, 0, k_, rows, 0, length_);
    kernels::copy_time_range(v_spare_, 0, v_, rows, 0, length_);
    std::swap(k_, k_spare_);
    std::swap(v_, v_spare_);
  }
  rows_ = n;
}

MultiHeadAttention::MultiHeadAttention(const std::string& name, std::int64_t d_model, std::int64_t heads,
                                       std::uint64_t& next_seed, const Placement& placement)
    : q_(name + ".q_proj", d_model, d_model, next_seed++, placement),
      k_(name + ".k_proj", d_model, d_model, next_seed++, placement),
      v_(name + ".v_proj", d_model, d_model, next_seed++, placement),
      out_(name + ".out_proj", d_model, d_model, next_seed++, placement),
      local_heads_(heads / placement.tensor_parallel_size()),
      head_dim_(d_model / heads) {
  TESSERA_CHECK(heads >= 1 && d_model % heads == 0 && heads % placement.tensor_parallel_size() == 0,
                "attention '{}': d_model {} does not split into {} heads over {} tensor-parallel ranks", name, d_model,
                heads, placement.tensor_parallel_size());
}

// One position (a decoding step): [B, 1, H, dk] and [B, H, 1, dk] are one layout, so no copy.
ag::Var MultiHeadAttention::split_heads(const ag::Var& x) const {
  const std::int64_t b = x.shape()[0], l = x.shape()[1];
  if (l == 1) return ag::reshape(x, {b, local_heads_, 1, head_dim_});
  return ag::permute(ag::reshape(x, {b, l, local_heads_, head_dim_}), {0, 2, 1, 3});
}

ag::Var MultiHeadAttention::merge_heads(const ag::Var& x) const {
  const std::int64_t b = x.shape()[0], l = x.shape()[2];
  if (l == 1) return ag::reshape(x, {b, 1, local_heads_ * head_dim_});
  return ag::reshape(ag::permute(x, {0, 2, 1, 3}), {b, l, local_heads_ * head_dim_});
}

ag::Var MultiHeadAttention::operator()(const ag::Var& query, const ag::Var& key_value, const Tensor& key_padding,
                                       bool causal) const {
  // One entry into the parallel region per input: self-attention's Q, K and V share it.
  const ag::Var xq = q_.enter(query);
  const ag::Var xkv = key_value.node() == query.node() ? xq : k_.enter(key_value);
  const ag::Var q = split_heads(q_.forward_entered(xq)), k = split_heads(k_.forward_entered(xkv)),
                v = split_heads(v_.forward_entered(xkv));
  return out_(merge_heads(ag::attention(q, k, v, key_padding, {.causal = causal, .scale = 0.0})));
}

ag::Var MultiHeadAttention::attend_cache(const ag::Var& q, const KeyValueCache& cache,
                                         const Tensor& key_padding) const {
  return out_(merge_heads(ag::attention(q, ag::Var(cache.keys()), ag::Var(cache.values()), key_padding,
                                        {.causal = false,
                                         .scale = 0.0,
                                         .key_length = cache.length(),
                                         .kv_rows = cache.row_map(),
                                         .key_rows = cache.key_rows()})));
}

KeyValueCache MultiHeadAttention::project_memory(const ag::Var& memory) const {
  return {split_heads(k_.forward_entered(memory)).value(), split_heads(v_.forward_entered(memory)).value()};
}

ag::Var MultiHeadAttention::attend_cached(const ag::Var& x, const KeyValueCache& cache,
                                          const Tensor& key_padding) const {
  return attend_cache(split_heads(q_.forward_entered(x)), cache, key_padding);
}

ag::Var MultiHeadAttention::step(const ag::Var& x, KeyValueCache& cache) const {
  const ag::Var q = split_heads(q_.forward_entered(x));
  cache.append(split_heads(k_.forward_entered(x)).value(), split_heads(v_.forward_entered(x)).value());
  // The newest query may see every cached key: no mask needed.
  return attend_cache(q, cache, Tensor());
}

std::vector<Parameter> MultiHeadAttention::parameters() const {
  std::vector<Parameter> all = q_.parameters();
  for (const auto& more : {k_.parameters(), v_.parameters(), out_.parameters()}) append(all, more);
  return all;
}

}  // namespace tessera::nn
