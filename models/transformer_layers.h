// The Transformer's encoder and decoder layers (Vaswani et al. 2017, section 3.1): attention and
// feed-forward sub-layers, each inside a residual connection with a layer norm and dropout.
#pragma once

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "models/dropout_stream.h"
#include "models/transformer_config.h"
#include "nn/attention.h"
#include "nn/feed_forward.h"
#include "nn/layer_norm.h"

namespace tessera::models {

// Wraps sub-layer f: post-norm LN(x + drop(f(x))) (the paper's) or pre-norm x + drop(f(LN(x))).
struct Residual {
  bool pre_norm = false;
  double dropout = 0.0;
  template <typename F>
  ag::Var operator()(const nn::LayerNorm& norm, const ag::Var& x, DropoutStream& drop, F&& sublayer) const {
    if (pre_norm) return ag::add(x, drop.apply(sublayer(norm(x)), dropout));
    return norm(ag::add(x, drop.apply(sublayer(x), dropout)));
  }
};

class EncoderLayer {
 public:
  // Parameters `prefix`.self_attn.*, .self_attn_layer_norm.*, .fc1.*, .fc2.*, .final_layer_norm.*
  // in that order; the weights draw from next_seed on, which it advances past.
  EncoderLayer(const std::string& prefix, const TransformerConfig& config, std::uint64_t& next_seed,
               const nn::Placement& placement);

  // x [B, Ls, d_model] with the source padding [B, Ls] int32. With config.recompute_layers only x
  // is kept for backward, which runs the layer again.
  ag::Var operator()(const ag::Var& x, const Tensor& src_padding, DropoutStream& drop) const;

  std::vector<nn::Parameter> parameters() const;

 private:
  ag::Var forward(const ag::Var& x, const Tensor& src_padding, DropoutStream& drop) const;

  bool recompute_ = false;
  // Declared in the order the parameters are made (members initialize in this order).
  Residual residual_;
  nn::MultiHeadAttention self_attn_;
  nn::LayerNorm self_attn_norm_;
  nn::FeedForward ffn_;
  nn::LayerNorm ffn_norm_;
};

class DecoderLayer {
 public:
  // Parameters `prefix`.self_attn.*, .self_attn_layer_norm.*, .encoder_attn.*,
  // .encoder_attn_layer_norm.*, .fc1.*, .fc2.*, .final_layer_norm.* in that order.
  DecoderLayer(const std::string& prefix, const TransformerConfig& config, std::uint64_t& next_seed,
               const nn::Placement& placement);

  // y [B, Lt, d_model] (causal) attending to the encoder's memory [B, Ls, d_model]. With
  // config.recompute_layers only y and memory are kept for backward, which runs the layer again.
  ag::Var operator()(const ag::Var& y, const ag::Var& memory, const Tensor& src_padding, DropoutStream& drop) const;

  // Incremental decoding: the cross-attention's keys and values of the memory, once...
  nn::KeyValueCache project_memory(const ag::Var& memory) const { return cross_attn_.project_memory(memory); }
  // ...then one new position y [B, 1, d_model] a step, appending its key and value to `self`.
  ag::Var step(const ag::Var& y, nn::KeyValueCache& self, const nn::KeyValueCache& cross,
               const Tensor& src_padding) const;

  std::vector<nn::Parameter> parameters() const;

 private:
  ag::Var forward(const ag::Var& y, const ag::Var& memory, const Tensor& src_padding, DropoutStream& drop) const;

  bool recompute_ = false;
  Residual residual_;
  nn::MultiHeadAttention self_attn_;
  nn::LayerNorm self_attn_norm_;
  nn::MultiHeadAttention cross_attn_;
  nn::LayerNorm cross_attn_norm_;
  nn::FeedForward ffn_;
  nn::LayerNorm ffn_norm_;
};

}  // namespace tessera::models
