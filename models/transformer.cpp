#include "models/transformer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/projected_cross_entropy.h"
#include "dist/parallel_ops.h"
#include "kernels/dispatch.h"
#include "nn/init.h"

namespace tessera::models {

void DecoderCache::select_rows(const std::vector<std::int64_t>& self_rows,
                               const std::optional<std::vector<std::int64_t>>& cross_rows) {
  for (nn::KeyValueCache& c : self_attn) c.select_rows(self_rows);
  if (!cross_rows) return;
  for (nn::KeyValueCache& c : cross_attn) c.select_rows(*cross_rows);
  // Mapped caches keep their rows, and the padding (theirs) with them.
  if (cross_attn.empty() || !cross_attn.front().row_map().defined())
    src_padding = kernels::index_rows(src_padding, *cross_rows);
}

void Transformer::add(const std::vector<nn::Parameter>& params) {
  for (const nn::Parameter& p : params) {
    TESSERA_CHECK(!index_.count(p.var.name()), "model: duplicate parameter name '{}'", p.var.name());
    index_[p.var.name()] = params_.size();
    params_.push_back(p.var);
    shard_dims_.push_back(p.shard);
    whole_parameters_ += p.whole_numel;
  }
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
    src_embed_ = tgt_embed_ = nn::Embedding("embed_tokens", cfg_.src_vocab, d, s++, placement_, cfg_.vocab_parallel);
  } else {
    src_embed_ = nn::Embedding("encoder.embed_tokens", cfg_.src_vocab, d, s++, placement_, cfg_.vocab_parallel);
    tgt_embed_seed = s++;
  }
  add(src_embed_.parameters());
  for (std::int64_t i = 0; i < cfg_.encoder_layers; ++i) {
    encoder_.emplace_back("encoder.layers." + std::to_string(i), cfg_, s, placement_);
    add(encoder_.back().parameters());
  }
  if (cfg_.pre_norm) add((encoder_final_norm_ = final_norm("encoder.layer_norm")).parameters());
  if (!cfg_.share_embeddings) {
    tgt_embed_ =
        nn::Embedding("decoder.embed_tokens", cfg_.tgt_vocab, d, tgt_embed_seed, placement_, cfg_.vocab_parallel);
    add(tgt_embed_.parameters());
  }
  for (std::int64_t i = 0; i < cfg_.decoder_layers; ++i) {
    decoder_.emplace_back("decoder.layers." + std::to_string(i), cfg_, s, placement_);
    add(decoder_.back().parameters());
  }
  if (cfg_.pre_norm) add((decoder_final_norm_ = final_norm("decoder.layer_norm")).parameters());
  out_proj_ = tgt_embed_.weight();
  vocab_group_ = tgt_embed_.vocab_group();
  out_block_ = tgt_embed_.block();
  if (!cfg_.tie_output) {
    const nn::Parameter p =
        nn::make_parameter("decoder.output_projection.weight", nn::xavier_uniform(cfg_.tgt_vocab, d, s++),
                           vocab_group_ != nullptr ? ShardDim::rows : ShardDim::replicated, placement_);
    add({p});
    out_proj_ = p.var;
  }
  nn::keep_compute_copy(out_proj_, placement_);  // the tied embedding table's too
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

ag::Var Transformer::output_logits(const ag::Var& h) const {
  // Vocabulary-parallel: the replicated h enters the parallel region (its gradient is summed).
  const ag::Var x = vocab_group_ != nullptr ? dist::copy_to_tensor_parallel(h, *vocab_group_) : h;
  return ag::matmul(x, ag::compute_copy(out_proj_, cfg_.compute_dtype()), false, true);
}

ag::Var Transformer::cross_entropy(const ag::Var& logits, const Tensor& targets, double smoothing,
                                   std::int32_t ignore_index, double* nll_sum) const {
  if (vocab_group_ == nullptr) return ag::cross_entropy(logits, targets, smoothing, ignore_index, nll_sum);
  return dist::vocab_parallel_cross_entropy(logits, targets, smoothing, ignore_index, out_block_, *vocab_group_,
                                            nll_sum);
}

// ---------------------------------------------------------------- training / scoring
ag::Var Transformer::encode(const Tensor& src, const Tensor& src_padding, DropoutStream& drop) const {
  ag::Var x = embed(src_embed_, src, 0, drop);
  for (const EncoderLayer& l : encoder_) x = l(x, src_padding, drop);
  return cfg_.pre_norm ? encoder_final_norm_(x) : x;
}

ag::Var Transformer::decode_hidden(const ag::Var& memory, const Tensor& src_padding, const Tensor& tgt_in,
                                   DropoutStream& drop) const {
  ag::Var y = embed(tgt_embed_, tgt_in, 0, drop);
  for (const DecoderLayer& l : decoder_) y = l(y, memory, src_padding, drop);
  return cfg_.pre_norm ? decoder_final_norm_(y) : y;
}

ag::Var Transformer::decode(const ag::Var& memory, const Tensor& src_padding, const Tensor& tgt_in,
                            DropoutStream& drop) const {
  return output_logits(decode_hidden(memory, src_padding, tgt_in, drop));
}

ag::Var Transformer::forward_loss(const Tensor& src, const Tensor& src_padding, const Tensor& tgt_in,
                                  const Tensor& targets, double smoothing, std::int32_t ignore_index, double* nll_sum,
                                  DropoutStream& drop) const {
  const std::int64_t rows = targets.numel();
  // The padding mask goes to the device once, as in forward().
  const Tensor padding = src_padding.to(cfg_.device);
  const ag::Var h = decode_hidden(encode(src, padding, drop), padding, tgt_in, drop);
  // The fused op is a CPU one of the model's own dtype; the other layouts keep the logits.
  const bool fused = vocab_group_ == nullptr && cfg_.device == Device::cpu && cfg_.compute_dtype() == cfg_.dtype;
  if (fused)
    return ag::projected_cross_entropy(ag::reshape(h, {rows, cfg_.d_model}), out_proj_, targets, smoothing,
                                       ignore_index, nll_sum);
  const ag::Var logits = ag::reshape(output_logits(h), {rows, out_block_.count});
  return cross_entropy(logits, targets, smoothing, ignore_index, nll_sum);
}

ag::Var Transformer::forward(const Tensor& src, const Tensor& src_padding, const Tensor& tgt_in,
                             DropoutStream& drop) const {
  // The padding mask goes to the device once: every attention forward and backward reads it there.
  const Tensor padding = src_padding.to(cfg_.device);
  return decode(encode(src, padding, drop), padding, tgt_in, drop);
}

// ---------------------------------------------------------------- incremental decoding
DecoderCache Transformer::start_decoding(const Tensor& memory, const Tensor& src_padding, std::int64_t capacity) const {
  ag::NoGradGuard no_grad;
  DecoderCache cache;
  cache.src_padding = src_padding;
  const ag::Var mem(memory);
  // Most hypotheses end long before the length limit: a first buffer of 32 positions (doubled when
  // full) is the same size for every batch, so the allocator hands back the last batch's pages
  // rather than new ones that fault in as they are first written.
  const std::int64_t first_capacity = std::min<std::int64_t>(capacity, 32);
  for (const DecoderLayer& l : decoder_) {
    cache.self_attn.emplace_back(first_capacity);
    cache.cross_attn.push_back(l.project_memory(mem));
  }
  return cache;
}

Tensor Transformer::decode_step(DecoderCache& cache, const std::vector<std::int32_t>& tokens) const {
  return decode_step_on_device(cache, tokens).to(Device::cpu);
}

Tensor Transformer::decode_step_on_device(DecoderCache& cache, const std::vector<std::int32_t>& tokens) const {
  return kernels::log_softmax_lastdim(decode_step_logits_on_device(cache, tokens));
}

Tensor Transformer::decode_step_logits_on_device(DecoderCache& cache, const std::vector<std::int32_t>& tokens) const {
  ag::NoGradGuard no_grad;
  DropoutStream no_dropout;
  const auto rows = static_cast<std::int64_t>(tokens.size());
  const Tensor ids = Tensor::from(tokens, {rows, 1});
  ag::Var y = embed(tgt_embed_, ids, cache.steps, no_dropout);
  for (std::size_t i = 0; i < decoder_.size(); ++i)
    y = decoder_[i].step(y, cache.self_attn[i], cache.cross_attn[i], cache.src_padding);
  if (cfg_.pre_norm) y = decoder_final_norm_(y);
  ++cache.steps;
  // In float32 (or the model's float64). Vocabulary-parallel, the ranks gather this step's logits
  // [rows, tgt_vocab] (small beside the training batch's).
  ag::Var logits = ag::cast(ag::reshape(output_logits(y), {rows, out_block_.count}), cfg_.dtype);
  if (vocab_group_ != nullptr) logits = ag::Var(dist::gather_vocab_logits(logits.value(), *vocab_group_));
  return logits.value();
}

}  // namespace tessera::models
