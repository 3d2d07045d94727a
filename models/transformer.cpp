#include "models/transformer.h"

#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dist/parallel_ops.h"
#include "kernels/dispatch.h"
#include "nn/positional.h"

namespace tessera::models {
namespace {

Tensor xavier_uniform(std::int64_t out, std::int64_t in, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double bound = std::sqrt(6.0 / static_cast<double>(in + out));
  std::uniform_real_distribution<double> u(-bound, bound);
  std::vector<double> v(static_cast<std::size_t>(out * in));
  for (auto& e : v) e = u(rng);
  return Tensor::from_doubles(v, {out, in}, DType::f32);
}

// Embeddings ~ N(0, d^-1/2): after the sqrt(d) scale their entries have unit variance.
Tensor embedding_init(std::int64_t vocab, std::int64_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<double> v(static_cast<std::size_t>(vocab * d));
  for (auto& e : v) e = n(rng);
  return Tensor::from_doubles(v, {vocab, d}, DType::f32);
}

}  // namespace

void validate(const TransformerConfig& c, int tensor_parallel) {
  TESSERA_CHECK(c.src_vocab > 4 && c.tgt_vocab > 4,
                "model: vocabulary sizes must exceed the 4 special ids, got {} and {}", c.src_vocab, c.tgt_vocab);
  TESSERA_CHECK(c.encoder_layers >= 1 && c.decoder_layers >= 1, "model: layers must be >= 1");
  TESSERA_CHECK(c.heads >= 1 && c.d_model % c.heads == 0,
                "model: d_model {} is not divisible by heads {} (model.d_model, model.heads)", c.d_model, c.heads);
  TESSERA_CHECK(c.d_model % 2 == 0, "model: d_model {} must be even (sinusoidal positions)", c.d_model);
  TESSERA_CHECK(c.dropout >= 0 && c.dropout < 1, "model: dropout {} outside [0, 1)", c.dropout);
  // Tensor parallelism splits the heads and d_ff; both are named when both fail, so that fixing
  // one does not meet the other on the next start.
  std::vector<std::string> unsplit, keys;
  if (c.heads % tensor_parallel != 0) {
    unsplit.push_back(fmt::format("heads {}", c.heads));
    keys.emplace_back("model.heads");
  }
  if (c.d_ff % tensor_parallel != 0) {
    unsplit.push_back(fmt::format("d_ff {}", c.d_ff));
    keys.emplace_back("model.d_ff");
  }
  TESSERA_CHECK(unsplit.empty(), "model: {} {} not divide over {} tensor-parallel ranks ({}, parallel.tensor)",
                fmt::join(unsplit, " and "), unsplit.size() == 1 && c.heads % tensor_parallel == 0 ? "does" : "do",
                tensor_parallel, fmt::join(keys, ", "));
  TESSERA_CHECK(c.dtype == DType::f32 || c.dtype == DType::f64, "model: parameters are float32 or float64, not {}",
                dtype_name(c.dtype));
  TESSERA_CHECK(!c.bf16_compute || (c.device == Device::cuda && c.dtype == DType::f32),
                "model: bfloat16 compute (train.precision: bf16) runs on the GPU from float32 weights (train.device: "
                "cuda), not on {} with {} weights",
                device_name(c.device), dtype_name(c.dtype));
  if (c.device == Device::cuda) {
    const std::int64_t head_dim = c.d_model / c.heads;
    TESSERA_CHECK(head_dim == 32 || head_dim == 64 || head_dim == 128,
                  "model: attention heads of {} (d_model {} / heads {}) on the GPU; its attention takes head sizes "
                  "32, 64 or 128",
                  head_dim, c.d_model, c.heads);
    TESSERA_CHECK(c.dtype == DType::f32, "model: parameters on the GPU are float32, not {}", dtype_name(c.dtype));
  }
  TESSERA_CHECK(!c.share_embeddings || c.src_vocab == c.tgt_vocab,
                "model: share_embeddings needs one vocabulary, but source has {} and target {} entries", c.src_vocab,
                c.tgt_vocab);
}

ag::Var DropoutStream::apply(const ag::Var& x, double p) {
  if (!training || p == 0.0) return x;
  const auto blocks = static_cast<std::uint64_t>((x.value().numel() + 3) / 4);  // Philox blocks of 4 consumed
  // Past `end` the masks would repeat the next update's: refuse rather than correlate them.
  TESSERA_CHECK(blocks <= end - offset,
                "dropout: one update draws more than 2^{} random blocks (train.batch_tokens x train.accumulate per "
                "replica is too large)",
                kStepBits);
  ag::Var y = ag::dropout(x, p, seed, offset);
  offset += blocks;
  return y;
}

DropoutStream DropoutStream::for_step(std::uint64_t seed, std::int64_t replica, std::int64_t step) {
  TESSERA_CHECK(seed >> 32 == 0 && replica >= 0 && replica >> 32 == 0 && step >= 0 && step >> (64 - kStepBits) == 0,
                "dropout: seed {}, replica {} or step {} out of range", seed, replica, step);
  const std::uint64_t first = static_cast<std::uint64_t>(step) << kStepBits;
  return {.seed = seed | static_cast<std::uint64_t>(replica) << 32,
          .offset = first,
          .training = true,
          .end = first + (std::uint64_t{1} << kStepBits)};
}

void DecoderCache::select_rows(const std::vector<std::int64_t>& rows) {
  for (auto* group : {&self_k, &self_v, &cross_k, &cross_v})
    for (Tensor& t : *group)
      if (t.defined()) t = kernels::index_rows(t, rows);
  src_padding = kernels::index_rows(src_padding, rows);
}

ag::Var Transformer::param(const std::string& name, Tensor init, ShardDim shard) {
  TESSERA_CHECK(!index_.count(name), "model: duplicate parameter name '{}'", name);
  index_[name] = params_.size();
  // The full tensor is drawn as in a single process, then this rank keeps its block.
  Tensor value =
      dist::take_block(init, shard, tensor_parallel_rank(), tensor_parallel_size()).to(cfg_.dtype).to(cfg_.device);
  params_.push_back(ag::Var::parameter(std::move(value), name));
  shard_dims_.push_back(tensor_parallel_size() > 1 ? shard : ShardDim::replicated);
  return params_.back();
}

Transformer::Linear Transformer::make_linear(const std::string& name, std::int64_t in, std::int64_t out,
                                             std::uint64_t& seed, Split split) {
  const ShardDim w = split == Split::column_parallel ? ShardDim::rows
                     : split == Split::row_parallel  ? ShardDim::columns
                                                     : ShardDim::replicated;
  const ShardDim b = split == Split::column_parallel ? ShardDim::rows : ShardDim::replicated;
  Linear l{param(name + ".weight", xavier_uniform(out, in, seed++), w), param(name + ".bias", Tensor::zeros({out}), b),
           cfg_.compute_dtype()};
  if (split == Split::row_parallel && tp_ != nullptr && tp_->size() > 1) l.row_parallel = tp_;
  return l;
}

ag::Var Transformer::Linear::operator()(const ag::Var& x) const {
  const ag::Var wc = ag::cast(w, compute), bc = ag::cast(b, compute);
  if (row_parallel == nullptr) return ag::linear(x, wc, bc);
  return ag::add(dist::reduce_from_tensor_parallel(ag::linear(x, wc), *row_parallel), bc);
}

ag::Var Transformer::enter_parallel(const ag::Var& x) const {
  return tp_ != nullptr ? dist::copy_to_tensor_parallel(x, *tp_) : x;
}

Transformer::Norm Transformer::make_norm(const std::string& name) {
  return {param(name + ".weight", Tensor::ones({cfg_.d_model})), param(name + ".bias", Tensor::zeros({cfg_.d_model}))};
}

Transformer::Attention Transformer::make_attention(const std::string& name, std::uint64_t& seed) {
  const std::int64_t d = cfg_.d_model;
  return {make_linear(name + ".q_proj", d, d, seed, Split::column_parallel),
          make_linear(name + ".k_proj", d, d, seed, Split::column_parallel),
          make_linear(name + ".v_proj", d, d, seed, Split::column_parallel),
          make_linear(name + ".out_proj", d, d, seed, Split::row_parallel)};
}

Transformer::Transformer(const TransformerConfig& config, std::uint64_t seed, dist::Communicator* tensor_parallel)
    : cfg_(config), tp_(tensor_parallel != nullptr && tensor_parallel->size() > 1 ? tensor_parallel : nullptr) {
  validate(cfg_, tensor_parallel_size());
  local_heads_ = cfg_.heads / tensor_parallel_size();
  // Each parameter draws from its own generator (seed, seed+1, ...): adding a parameter later
  // does not change the others' initial values.
  std::uint64_t s = seed * 1000003u;
  const std::int64_t d = cfg_.d_model;
  // The parameters' order, reversed, is the order backward finishes their gradients, which the
  // data-parallel gradient buckets follow: the decoder's own embedding and the pre-norm final
  // norms are made after the encoder (its seed is still drawn here, so the values do not change).
  std::uint64_t tgt_embed_seed = 0;
  if (cfg_.share_embeddings) {
    src_embed_ = tgt_embed_ = param("embed_tokens.weight", embedding_init(cfg_.src_vocab, d, s++));
  } else {
    src_embed_ = param("encoder.embed_tokens.weight", embedding_init(cfg_.src_vocab, d, s++));
    tgt_embed_seed = s++;
  }
  for (std::int64_t i = 0; i < cfg_.encoder_layers; ++i) {
    const std::string p = "encoder.layers." + std::to_string(i);
    EncoderLayer l;
    l.self_attn = make_attention(p + ".self_attn", s);
    l.self_attn_norm = make_norm(p + ".self_attn_layer_norm");
    l.ffn = {make_linear(p + ".fc1", d, cfg_.d_ff, s, Split::column_parallel),
             make_linear(p + ".fc2", cfg_.d_ff, d, s, Split::row_parallel)};
    l.ffn_norm = make_norm(p + ".final_layer_norm");
    encoder_.push_back(std::move(l));
  }
  if (cfg_.pre_norm) encoder_final_norm_ = make_norm("encoder.layer_norm");
  if (!cfg_.share_embeddings)
    tgt_embed_ = param("decoder.embed_tokens.weight", embedding_init(cfg_.tgt_vocab, d, tgt_embed_seed));
  for (std::int64_t i = 0; i < cfg_.decoder_layers; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i);
    DecoderLayer l;
    l.self_attn = make_attention(p + ".self_attn", s);
    l.self_attn_norm = make_norm(p + ".self_attn_layer_norm");
    l.cross_attn = make_attention(p + ".encoder_attn", s);
    l.cross_attn_norm = make_norm(p + ".encoder_attn_layer_norm");
    l.ffn = {make_linear(p + ".fc1", d, cfg_.d_ff, s, Split::column_parallel),
             make_linear(p + ".fc2", cfg_.d_ff, d, s, Split::row_parallel)};
    l.ffn_norm = make_norm(p + ".final_layer_norm");
    decoder_.push_back(std::move(l));
  }
  if (cfg_.pre_norm) decoder_final_norm_ = make_norm("decoder.layer_norm");
  out_proj_ =
      cfg_.tie_output ? tgt_embed_ : param("decoder.output_projection.weight", xavier_uniform(cfg_.tgt_vocab, d, s++));
  positions_ = nn::sinusoidal_positional_encoding(cfg_.max_positions, d).to(cfg_.compute_dtype()).to(cfg_.device);
}

const ag::Var& Transformer::parameter(const std::string& name) const {
  auto it = index_.find(name);
  TESSERA_CHECK(it != index_.end(), "model: no parameter named '{}'", name);
  return params_[it->second];
}

std::int64_t Transformer::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p.value().numel();
  return n;
}

// ---------------------------------------------------------------- building blocks
ag::Var Transformer::embed(const ag::Var& table, const Tensor& ids, std::int64_t first_position,
                           DropoutStream& drop) const {
  const std::int64_t len = ids.size(-1);
  TESSERA_CHECK(first_position + len <= cfg_.max_positions,
                "model: position {} is beyond model.max_positions = {} (raise it or shorten the inputs)",
                first_position + len, cfg_.max_positions);
  // The rows come from the float32 table (its gradient stays float32), then join the compute dtype.
  ag::Var x = ag::scale(ag::cast(ag::embedding(table, ids), cfg_.compute_dtype()),
                        std::sqrt(static_cast<double>(cfg_.d_model)));
  x = ag::add(x, ag::Var(positions_.narrow_rows(first_position, len)));
  return drop.apply(x, cfg_.dropout);
}

ag::Var Transformer::norm(const Norm& n, const ag::Var& x) const {
  return ag::layer_norm(x, n.gamma, n.beta, cfg_.layer_norm_eps);
}

template <typename F>
ag::Var Transformer::residual(const Norm& n, const ag::Var& x, DropoutStream& drop, F&& sublayer) const {
  if (cfg_.pre_norm) return ag::add(x, drop.apply(sublayer(norm(n, x)), cfg_.dropout));
  return norm(n, ag::add(x, drop.apply(sublayer(x), cfg_.dropout)));
}

ag::Var Transformer::split_heads(const ag::Var& x) const {
  const std::int64_t b = x.shape()[0], l = x.shape()[1];
  return ag::permute(ag::reshape(x, {b, l, local_heads_, cfg_.d_model / cfg_.heads}), {0, 2, 1, 3});
}

ag::Var Transformer::merge_heads(const ag::Var& x) const {
  const std::int64_t b = x.shape()[0], l = x.shape()[2];
  return ag::reshape(ag::permute(x, {0, 2, 1, 3}), {b, l, local_heads_ * (cfg_.d_model / cfg_.heads)});
}

ag::Var Transformer::attend(const Attention& a, const ag::Var& x_q, const ag::Var& x_kv, const Tensor& key_padding,
                            bool causal) const {
  const ag::Var xq = enter_parallel(x_q);
  const ag::Var xkv = x_kv.node() == x_q.node() ? xq : enter_parallel(x_kv);
  const ag::Var q = split_heads(a.q(xq)), k = split_heads(a.k(xkv)), v = split_heads(a.v(xkv));
  return a.out(merge_heads(ag::attention(q, k, v, key_padding, {.causal = causal, .scale = 0.0})));
}

ag::Var Transformer::feed_forward(const FeedForward& f, const ag::Var& x) const {
  return f.fc2(ag::relu(f.fc1(enter_parallel(x))));
}

ag::Var Transformer::output_logits(const ag::Var& h) const {
  return ag::matmul(h, ag::cast(out_proj_, cfg_.compute_dtype()), false, true);
}

// ---------------------------------------------------------------- training / scoring
ag::Var Transformer::encode(const Tensor& src, const Tensor& src_padding, DropoutStream& drop) const {
  ag::Var x = embed(src_embed_, src, 0, drop);
  for (const EncoderLayer& l : encoder_) {
    x = residual(l.self_attn_norm, x, drop,
                 [&](const ag::Var& h) { return attend(l.self_attn, h, h, src_padding, false); });
    x = residual(l.ffn_norm, x, drop, [&](const ag::Var& h) { return feed_forward(l.ffn, h); });
  }
  return cfg_.pre_norm ? norm(encoder_final_norm_, x) : x;
}

ag::Var Transformer::decode(const ag::Var& memory, const Tensor& src_padding, const Tensor& tgt_in,
                            DropoutStream& drop) const {
  ag::Var y = embed(tgt_embed_, tgt_in, 0, drop);
  for (const DecoderLayer& l : decoder_) {
    // Causal self-attention needs no padding mask: padding sits after every real target token.
    y = residual(l.self_attn_norm, y, drop,
                 [&](const ag::Var& h) { return attend(l.self_attn, h, h, Tensor(), true); });
    y = residual(l.cross_attn_norm, y, drop,
                 [&](const ag::Var& h) { return attend(l.cross_attn, h, memory, src_padding, false); });
    y = residual(l.ffn_norm, y, drop, [&](const ag::Var& h) { return feed_forward(l.ffn, h); });
  }
  if (cfg_.pre_norm) y = norm(decoder_final_norm_, y);
  return output_logits(y);
}

// ---------------------------------------------------------------- incremental decoding
DecoderCache Transformer::start_decoding(const Tensor& memory, const Tensor& src_padding) const {
  ag::NoGradGuard no_grad;
  DecoderCache cache;
  cache.src_padding = src_padding;
  const ag::Var mem(memory);
  for (const DecoderLayer& l : decoder_) {
    cache.self_k.emplace_back();
    cache.self_v.emplace_back();
    cache.cross_k.push_back(split_heads(l.cross_attn.k(mem)).value());
    cache.cross_v.push_back(split_heads(l.cross_attn.v(mem)).value());
  }
  return cache;
}

Tensor Transformer::decode_step(DecoderCache& cache, const std::vector<std::int32_t>& tokens) const {
  ag::NoGradGuard no_grad;
  DropoutStream no_dropout;
  const auto rows = static_cast<std::int64_t>(tokens.size());
  const Tensor ids = Tensor::from(tokens, {rows, 1});
  ag::Var y = embed(tgt_embed_, ids, cache.steps, no_dropout);
  for (std::size_t i = 0; i < decoder_.size(); ++i) {
    const DecoderLayer& l = decoder_[i];
    y = residual(l.self_attn_norm, y, no_dropout, [&](const ag::Var& h) {
      const ag::Var q = split_heads(l.self_attn.q(h));
      Tensor k = split_heads(l.self_attn.k(h)).value(), v = split_heads(l.self_attn.v(h)).value();
      if (cache.steps > 0) {  // append this step's key and value to the cache (dimension 2: time)
        k = kernels::concat({cache.self_k[i], k}, 2);
        v = kernels::concat({cache.self_v[i], v}, 2);
      }
      cache.self_k[i] = k;
      cache.self_v[i] = v;
      // The newest query may see every cached key: no mask needed.
      return l.self_attn.out(
          merge_heads(ag::attention(q, ag::Var(k), ag::Var(v), Tensor(), {.causal = false, .scale = 0.0})));
    });
    y = residual(l.cross_attn_norm, y, no_dropout, [&](const ag::Var& h) {
      const ag::Var q = split_heads(l.cross_attn.q(h));
      return l.cross_attn.out(merge_heads(ag::attention(q, ag::Var(cache.cross_k[i]), ag::Var(cache.cross_v[i]),
                                                        cache.src_padding, {.causal = false, .scale = 0.0})));
    });
    y = residual(l.ffn_norm, y, no_dropout, [&](const ag::Var& h) { return feed_forward(l.ffn, h); });
  }
  if (cfg_.pre_norm) y = norm(decoder_final_norm_, y);
  ++cache.steps;
  // Beam search scores on the host, in float32 (or the model's float64).
  const ag::Var logits = ag::cast(ag::reshape(output_logits(y), {rows, cfg_.tgt_vocab}), cfg_.dtype);
  return ag::log_softmax(logits).value().to(Device::cpu);
}

}  // namespace tessera::models
