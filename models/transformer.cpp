#include "models/transformer.h"

#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "nn/init.h"

namespace tessera::models {
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
  for (auto* layers : {&self_attn, &cross_attn})
    for (nn::KeyValueCache& c : *layers) c.select_rows(rows);
  src_padding = kernels::index_rows(src_padding, rows);
}

void Transformer::add(const std::vector<nn::Parameter>& params) {
  for (const nn::Parameter& p : params) {
    TESSERA_CHECK(!index_.count(p.var.name()), "model: duplicate parameter name '{}'", p.var.name());
    index_[p.var.name()] = params_.size();
    params_.push_back(p.var);
    shard_dims_.push_back(p.shard);
  }
}

Transformer::EncoderLayer Transformer::make_encoder_layer(const std::string& prefix, std::uint64_t& next_seed) {
  const std::int64_t d = cfg_.d_model;
  // Braced initializers run in order: the layers draw their seeds as listed.
  EncoderLayer l{nn::MultiHeadAttention(prefix + ".self_attn", d, cfg_.heads, next_seed, placement_),
                 nn::LayerNorm(prefix + ".self_attn_layer_norm", d, cfg_.layer_norm_eps, placement_),
                 nn::FeedForward(prefix, d, cfg_.d_ff, next_seed, placement_),
                 nn::LayerNorm(prefix + ".final_layer_norm", d, cfg_.layer_norm_eps, placement_)};
  for (const auto& params :
       {l.self_attn.parameters(), l.self_attn_norm.parameters(), l.ffn.parameters(), l.ffn_norm.parameters()})
    add(params);
  return l;
}

Transformer::DecoderLayer Transformer::make_decoder_layer(const std::string& prefix, std::uint64_t& next_seed) {
  const std::int64_t d = cfg_.d_model;
  DecoderLayer l{nn::MultiHeadAttention(prefix + ".self_attn", d, cfg_.heads, next_seed, placement_),
                 nn::LayerNorm(prefix + ".self_attn_layer_norm", d, cfg_.layer_norm_eps, placement_),
                 nn::MultiHeadAttention(prefix + ".encoder_attn", d, cfg_.heads, next_seed, placement_),
                 nn::LayerNorm(prefix + ".encoder_attn_layer_norm", d, cfg_.layer_norm_eps, placement_),
                 nn::FeedForward(prefix, d, cfg_.d_ff, next_seed, placement_),
                 nn::LayerNorm(prefix + ".final_layer_norm", d, cfg_.layer_norm_eps, placement_)};
  for (const auto& params : {l.self_attn.parameters(), l.self_attn_norm.parameters(), l.cross_attn.parameters(),
                             l.cross_attn_norm.parameters(), l.ffn.parameters(), l.ffn_norm.parameters()})
    add(params);
  return l;
}

Transformer::Transformer(const TransformerConfig& config, std::uint64_t seed, dist::Communicator* tensor_parallel)
    : cfg_(config), tp_(tensor_parallel != nullptr && tensor_parallel->size() > 1 ? tensor_parallel : nullptr) {
  validate(cfg_, tensor_parallel_size());
  placement_ = {.dtype = cfg_.dtype, .device = cfg_.device, .compute = cfg_.compute_dtype(), .tensor_parallel = tp_};
  // Each weight draws from its own generator (seed, seed+1, ...): adding a parameter later
  // does not change the others' initial values.
  std::uint64_t s = seed * 1000003u;
  const std::int64_t d = cfg_.d_model;
  // The parameters' order, reversed, is the order backward finishes their gradients, which the
  // data-parallel gradient buckets follow: the decoder's own embedding and the pre-norm final
  // norms are made after the encoder (its seed is still drawn here, so the values do not change).
  std::uint64_t tgt_embed_seed = 0;
  if (cfg_.share_embeddings) {
    src_embed_ = tgt_embed_ = nn::Embedding("embed_tokens", cfg_.src_vocab, d, s++, placement_);
  } else {
    src_embed_ = nn::Embedding("encoder.embed_tokens", cfg_.src_vocab, d, s++, placement_);
    tgt_embed_seed = s++;
  }
  add(src_embed_.parameters());
  for (std::int64_t i = 0; i < cfg_.encoder_layers; ++i)
    encoder_.push_back(make_encoder_layer("encoder.layers." + std::to_string(i), s));
  if (cfg_.pre_norm) add((encoder_final_norm_ = final_norm("encoder.layer_norm")).parameters());
  if (!cfg_.share_embeddings) {
    tgt_embed_ = nn::Embedding("decoder.embed_tokens", cfg_.tgt_vocab, d, tgt_embed_seed, placement_);
    add(tgt_embed_.parameters());
  }
  for (std::int64_t i = 0; i < cfg_.decoder_layers; ++i)
    decoder_.push_back(make_decoder_layer("decoder.layers." + std::to_string(i), s));
  if (cfg_.pre_norm) add((decoder_final_norm_ = final_norm("decoder.layer_norm")).parameters());
  out_proj_ = tgt_embed_.weight();
  if (!cfg_.tie_output) {
    const nn::Parameter p =
        nn::make_parameter("decoder.output_projection.weight", nn::xavier_uniform(cfg_.tgt_vocab, d, s++),
                           ShardDim::replicated, placement_);
    add({p});
    out_proj_ = p.var;
  }
  positions_ = nn::PositionalEncoding(cfg_.max_positions, d, cfg_.compute_dtype(), cfg_.device);
}

nn::LayerNorm Transformer::final_norm(const std::string& name) const {
  return nn::LayerNorm(name, cfg_.d_model, cfg_.layer_norm_eps, placement_);
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
ag::Var Transformer::embed(const nn::Embedding& table, const Tensor& ids, std::int64_t first_position,
                           DropoutStream& drop) const {
  const std::int64_t len = ids.size(-1);
  TESSERA_CHECK(first_position + len <= cfg_.max_positions,
                "model: position {} is beyond model.max_positions = {} (raise it or shorten the inputs)",
                first_position + len, cfg_.max_positions);
  return drop.apply(positions_(table(ids), first_position), cfg_.dropout);
}

template <typename F>
ag::Var Transformer::residual(const nn::LayerNorm& norm, const ag::Var& x, DropoutStream& drop, F&& sublayer) const {
  if (cfg_.pre_norm) return ag::add(x, drop.apply(sublayer(norm(x)), cfg_.dropout));
  return norm(ag::add(x, drop.apply(sublayer(x), cfg_.dropout)));
}

ag::Var Transformer::output_logits(const ag::Var& h) const {
  return ag::matmul(h, ag::cast(out_proj_, cfg_.compute_dtype()), false, true);
}

// ---------------------------------------------------------------- training / scoring
ag::Var Transformer::encode(const Tensor& src, const Tensor& src_padding, DropoutStream& drop) const {
  ag::Var x = embed(src_embed_, src, 0, drop);
  for (const EncoderLayer& l : encoder_) {
    x = residual(l.self_attn_norm, x, drop, [&](const ag::Var& h) { return l.self_attn(h, h, src_padding, false); });
    x = residual(l.ffn_norm, x, drop, [&](const ag::Var& h) { return l.ffn(h); });
  }
  return cfg_.pre_norm ? encoder_final_norm_(x) : x;
}

ag::Var Transformer::decode(const ag::Var& memory, const Tensor& src_padding, const Tensor& tgt_in,
                            DropoutStream& drop) const {
  ag::Var y = embed(tgt_embed_, tgt_in, 0, drop);
  for (const DecoderLayer& l : decoder_) {
    // Causal self-attention needs no padding mask: padding sits after every real target token.
    y = residual(l.self_attn_norm, y, drop, [&](const ag::Var& h) { return l.self_attn(h, h, Tensor(), true); });
    y = residual(l.cross_attn_norm, y, drop,
                 [&](const ag::Var& h) { return l.cross_attn(h, memory, src_padding, false); });
    y = residual(l.ffn_norm, y, drop, [&](const ag::Var& h) { return l.ffn(h); });
  }
  if (cfg_.pre_norm) y = decoder_final_norm_(y);
  return output_logits(y);
}

// ---------------------------------------------------------------- incremental decoding
DecoderCache Transformer::start_decoding(const Tensor& memory, const Tensor& src_padding) const {
  ag::NoGradGuard no_grad;
  DecoderCache cache;
  cache.src_padding = src_padding;
  const ag::Var mem(memory);
  for (const DecoderLayer& l : decoder_) {
    cache.self_attn.emplace_back();
    cache.cross_attn.push_back(l.cross_attn.project_memory(mem));
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
    y = residual(l.self_attn_norm, y, no_dropout,
                 [&](const ag::Var& h) { return l.self_attn.step(h, cache.self_attn[i]); });
    y = residual(l.cross_attn_norm, y, no_dropout, [&](const ag::Var& h) {
      return l.cross_attn.attend_cached(h, cache.cross_attn[i], cache.src_padding);
    });
    y = residual(l.ffn_norm, y, no_dropout, [&](const ag::Var& h) { return l.ffn(h); });
  }
  if (cfg_.pre_norm) y = decoder_final_norm_(y);
  ++cache.steps;
  // Beam search scores on the host, in float32 (or the model's float64).
  const ag::Var logits = ag::cast(ag::reshape(output_logits(y), {rows, cfg_.tgt_vocab}), cfg_.dtype);
  return ag::log_softmax(logits).value().to(Device::cpu);
}

}  // namespace tessera::models
