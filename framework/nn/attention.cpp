#include "nn/attention.h"

#include "autograd/ops.h"
#include "kernels/dispatch.h"

namespace tessera::nn {

void KeyValueCache::select_rows(const std::vector<std::int64_t>& rows) {
  for (Tensor* t : {&k, &v})
    if (t->defined()) *t = kernels::index_rows(*t, rows);
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

ag::Var MultiHeadAttention::split_heads(const ag::Var& x) const {
  const std::int64_t b = x.shape()[0], l = x.shape()[1];
  return ag::permute(ag::reshape(x, {b, l, local_heads_, head_dim_}), {0, 2, 1, 3});
}

ag::Var MultiHeadAttention::merge_heads(const ag::Var& x) const {
  const std::int64_t b = x.shape()[0], l = x.shape()[2];
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

ag::Var MultiHeadAttention::attend(const ag::Var& q, const Tensor& k, const Tensor& v,
                                   const Tensor& key_padding) const {
  return out_(merge_heads(ag::attention(q, ag::Var(k), ag::Var(v), key_padding, {.causal = false, .scale = 0.0})));
}

KeyValueCache MultiHeadAttention::project_memory(const ag::Var& memory) const {
  return {split_heads(k_.forward_entered(memory)).value(), split_heads(v_.forward_entered(memory)).value()};
}

ag::Var MultiHeadAttention::attend_cached(const ag::Var& x, const KeyValueCache& cache,
                                          const Tensor& key_padding) const {
  return attend(split_heads(q_.forward_entered(x)), cache.k, cache.v, key_padding);
}

ag::Var MultiHeadAttention::step(const ag::Var& x, KeyValueCache& cache) const {
  const ag::Var q = split_heads(q_.forward_entered(x));
  Tensor k = split_heads(k_.forward_entered(x)).value(), v = split_heads(v_.forward_entered(x)).value();
  if (cache.k.defined()) {  // append this position's key and value (dimension 2: time)
    k = kernels::concat({cache.k, k}, 2);
    v = kernels::concat({cache.v, v}, 2);
  }
  cache.k = k;
  cache.v = v;
  // The newest query may see every cached key: no mask needed.
  return attend(q, k, v, Tensor());
}

std::vector<Parameter> MultiHeadAttention::parameters() const {
  std::vector<Parameter> all = q_.parameters();
  for (const auto& more : {k_.parameters(), v_.parameters(), out_.parameters()}) append(all, more);
  return all;
}

}  // namespace tessera::nn
