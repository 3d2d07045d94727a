// The encoder-decoder Transformer of Vaswani et al. (2017), written against the autograd ops.
// No device or rank assumptions: the same code serves training, evaluation and decoding.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "dist/communicator.h"
#include "dist/sharding.h"
#include "models/dropout_stream.h"
#include "models/transformer_config.h"
#include "models/transformer_layers.h"
#include "nn/embedding.h"
#include "nn/positional.h"

namespace tessera::models {

using dist::ShardDim;

// Keys and values cached for incremental decoding, per decoder layer.
struct DecoderCache {
  std::vector<nn::KeyValueCache> self_attn;   // [B, H, t, dk] for the t tokens decoded so far
  std::vector<nn::KeyValueCache> cross_attn;  // [B, H, Ls, dk] from the encoder output, computed once
  Tensor src_padding;                         // [B, Ls] int32
  std::int64_t steps = 0;
  // Keeps only the given rows (beam search reorders hypotheses), in the given order.
  void select_rows(const std::vector<std::int64_t>& rows) { select_rows(rows, rows); }
  // The same with the cross-attention rows given apart: rows with the same source may share them
  // (a sentence's beams), so a beam reorder that keeps every sentence passes none (no copy).
  void select_rows(const std::vector<std::int64_t>& self_rows,
                   const std::optional<std::vector<std::int64_t>>& cross_rows);
};

class Transformer {
 public:
  // With a tensor-parallel group of size tp > 1 (Megatron-style), this rank holds heads/tp whole
  // attention heads and d_ff/tp feed-forward units: Q, K, V and fc1 split by output rows, the
  // attention output projection and fc2 by input columns, followed by an all-reduce. Embeddings,
  // layer norms and the output layer stay replicated, unless config.vocab_parallel splits the
  // embeddings and the output layer by vocabulary rows (dist/vocab_parallel.h). Initial values are
  // the slices of the single-process model's, whatever tp is. The group must outlive the model.
  Transformer(const TransformerConfig& config, std::uint64_t seed, dist::Communicator* tensor_parallel = nullptr);

  // Encoder output [B, Ls, d_model] for int32 src [B, Ls] with its padding mask [B, Ls].
  ag::Var encode(const Tensor& src, const Tensor& src_padding, DropoutStream& drop) const;
  // Decoder logits [B, Lt, tgt_vocab] for int32 tgt_in [B, Lt] (teacher forcing, causal);
  // vocabulary-parallel, this rank's block of them [B, Lt, output_block().count].
  ag::Var decode(const ag::Var& memory, const Tensor& src_padding, const Tensor& tgt_in, DropoutStream& drop) const;
  ag::Var forward(const Tensor& src, const Tensor& src_padding, const Tensor& tgt_in, DropoutStream& drop) const;

  // The label-smoothed cross entropy of decode()'s logits, reshaped to [N, columns], for int32
  // targets [N], summed over the rows (ag::cross_entropy's; vocabulary-parallel, the group's).
  ag::Var cross_entropy(const ag::Var& logits, const Tensor& targets, double smoothing, std::int32_t ignore_index,
                        double* nll_sum = nullptr) const;
  // The summed cross entropy of forward()'s logits against int32 targets [B * Lt], without the
  // [B * Lt, V] logits on one CPU process (ag::projected_cross_entropy); otherwise cross_entropy().
  ag::Var forward_loss(const Tensor& src, const Tensor& src_padding, const Tensor& tgt_in, const Tensor& targets,
                       double smoothing, std::int32_t ignore_index, double* nll_sum, DropoutStream& drop) const;
  // The target ids whose logits this rank computes (all of them unless vocabulary-parallel).
  const dist::VocabBlock& output_block() const { return out_block_; }

  // Incremental decoding (no graph is recorded): start from the encoder output, then each
  // step feeds one token per row and returns log-probabilities [B, tgt_vocab] for the next (a CPU
  // tensor of the model's dtype, whatever the device).
  // `capacity`: the most steps expected, preallocated in each self-attention cache (more still work).
  DecoderCache start_decoding(const Tensor& memory, const Tensor& src_padding, std::int64_t capacity = 0) const;
  Tensor decode_step(DecoderCache& cache, const std::vector<std::int32_t>& tokens) const;
  // The same log-probabilities left on the model's device (beam search chooses there: see
  // kernels::beam_topk).
  Tensor decode_step_on_device(DecoderCache& cache, const std::vector<std::int32_t>& tokens) const;
  // The logits of that step, before the log-softmax (beam_topk's `logits` option takes it there).
  Tensor decode_step_logits_on_device(DecoderCache& cache, const std::vector<std::int32_t>& tokens) const;

  const TransformerConfig& config() const { return cfg_; }
  // Every trainable parameter by dotted name, in a fixed order (a tied weight appears once).
  const std::vector<ag::Var>& parameters() const { return params_; }
  const ag::Var& parameter(const std::string& name) const;
  // How parameters()[i] is split over the tensor-parallel group (replicated when tp == 1).
  ShardDim shard_dim(std::size_t i) const { return shard_dims_[i]; }
  int tensor_parallel_size() const { return tp_ ? tp_->size() : 1; }
  int tensor_parallel_rank() const { return tp_ ? tp_->rank() : 0; }
  // Parameters of this rank (of its shards under tensor parallelism), and of the whole model.
  std::int64_t num_parameters() const;
  std::int64_t whole_num_parameters() const { return whole_parameters_; }

 private:
  // Appends a layer's parameters to parameters() (names must be unique).
  void add(const std::vector<nn::Parameter>& params);
  nn::LayerNorm final_norm(const std::string& name) const;  // pre-norm's, after the last layer

  ag::Var embed(const nn::Embedding& table, const Tensor& ids, std::int64_t first_position, DropoutStream& drop) const;
  ag::Var output_logits(const ag::Var& h) const;
  // decode() before the output projection: [B, Lt, d_model].
  ag::Var decode_hidden(const ag::Var& memory, const Tensor& src_padding, const Tensor& tgt_in,
                        DropoutStream& drop) const;

  TransformerConfig cfg_;
  dist::Communicator* tp_ = nullptr;
  nn::Placement placement_;
  std::vector<ag::Var> params_;
  std::vector<ShardDim> shard_dims_;
  std::int64_t whole_parameters_ = 0;
  std::map<std::string, std::size_t> index_;
  nn::Embedding src_embed_, tgt_embed_;        // one table when shared
  ag::Var out_proj_;                           // the target table when tied
  dist::Communicator* vocab_group_ = nullptr;  // tp_ when vocabulary-parallel
  dist::VocabBlock out_block_;                 // out_proj_'s rows of the target vocabulary
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  nn::LayerNorm encoder_final_norm_, decoder_final_norm_;  // pre-norm only
  nn::PositionalEncoding positions_;
};

}  // namespace tessera::models
