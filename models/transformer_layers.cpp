#include "models/transformer_layers.h"

#include <functional>
#include <memory>
#include <utility>

#include "autograd/checkpoint.h"

namespace tessera::models {
namespace {

// A layer's forward of its inputs, drawing its dropout masks from `drop`.
using LayerFn = std::function<ag::Var(const std::vector<ag::Var>&, DropoutStream& drop)>;

// layer(inputs) through ag::checkpoint: only the inputs stay for backward. Both runs start from
// this call's place in the dropout stream, so the recompute draws the same Philox offsets (the
// same masks); the caller's stream then moves past what the layer drew, as without recomputing.
ag::Var recomputed_in_backward(LayerFn layer, std::vector<ag::Var> inputs, const std::vector<nn::Parameter>& params,
                               DropoutStream& drop) {
  // The parameters last first: the checkpoint finishes their gradients in that order, the reverse
  // of the parameters' order, which the data-parallel gradient buckets follow.
  for (auto p = params.rbegin(); p != params.rend(); ++p) inputs.push_back(p->var);
  auto after = std::make_shared<DropoutStream>();
  const ag::Var out = ag::checkpoint(
      [layer = std::move(layer), start = drop, after](const std::vector<ag::Var>& in) {
        DropoutStream d = start;
        ag::Var y = layer(in, d);
        *after = d;
        return y;
      },
      std::move(inputs));
  drop = *after;
  return out;
}

}  // namespace

EncoderLayer::EncoderLayer(const std::string& prefix, const TransformerConfig& c, std::uint64_t& next_seed,
                           const nn::Placement& placement)
    : recompute_(c.recompute_layers),
      residual_{c.pre_norm, c.dropout},
      self_attn_(prefix + ".self_attn", c.d_model, c.heads, next_seed, placement),
      self_attn_norm_(prefix + ".self_attn_layer_norm", c.d_model, c.layer_norm_eps, placement),
      ffn_(prefix, c.d_model, c.d_ff, next_seed, placement),
      ffn_norm_(prefix + ".final_layer_norm", c.d_model, c.layer_norm_eps, placement) {}

ag::Var EncoderLayer::operator()(const ag::Var& x, const Tensor& src_padding, DropoutStream& drop) const {
  if (!recompute_) return forward(x, src_padding, drop);
  return recomputed_in_backward(
      [this, src_padding](const std::vector<ag::Var>& in, DropoutStream& d) { return forward(in[0], src_padding, d); },
      {x}, parameters(), drop);
}

ag::Var EncoderLayer::forward(const ag::Var& x, const Tensor& src_padding, DropoutStream& drop) const {
  const ag::Var h =
      residual_(self_attn_norm_, x, drop, [&](const ag::Var& in) { return self_attn_(in, in, src_padding, false); });
  return residual_(ffn_norm_, h, drop, [&](const ag::Var& in) { return ffn_(in); });
}

std::vector<nn::Parameter> EncoderLayer::parameters() const {
  std::vector<nn::Parameter> all = self_attn_.parameters();
  for (const auto& more : {self_attn_norm_.parameters(), ffn_.parameters(), ffn_norm_.parameters()})
    nn::append(all, more);
  return all;
}

DecoderLayer::DecoderLayer(const std::string& prefix, const TransformerConfig& c, std::uint64_t& next_seed,
                           const nn::Placement& placement)
    : recompute_(c.recompute_layers),
      residual_{c.pre_norm, c.dropout},
      self_attn_(prefix + ".self_attn", c.d_model, c.heads, next_seed, placement),
      self_attn_norm_(prefix + ".self_attn_layer_norm", c.d_model, c.layer_norm_eps, placement),
      cross_attn_(prefix + ".encoder_attn", c.d_model, c.heads, next_seed, placement),
      cross_attn_norm_(prefix + ".encoder_attn_layer_norm", c.d_model, c.layer_norm_eps, placement),
      ffn_(prefix, c.d_model, c.d_ff, next_seed, placement),
      ffn_norm_(prefix + ".final_layer_norm", c.d_model, c.layer_norm_eps, placement) {}

ag::Var DecoderLayer::operator()(const ag::Var& y, const ag::Var& memory, const Tensor& src_padding,
                                 DropoutStream& drop) const {
  if (!recompute_) return forward(y, memory, src_padding, drop);
  return recomputed_in_backward([this, src_padding](const std::vector<ag::Var>& in,
                                                    DropoutStream& d) { return forward(in[0], in[1], src_padding, d); },
                                {y, memory}, parameters(), drop);
}

ag::Var DecoderLayer::forward(const ag::Var& y, const ag::Var& memory, const Tensor& src_padding,
                              DropoutStream& drop) const {
  // Causal self-attention needs no padding mask: padding sits after every real target token.
  ag::Var h =
      residual_(self_attn_norm_, y, drop, [&](const ag::Var& in) { return self_attn_(in, in, Tensor(), true); });
  h = residual_(cross_attn_norm_, h, drop,
                [&](const ag::Var& in) { return cross_attn_(in, memory, src_padding, false); });
  return residual_(ffn_norm_, h, drop, [&](const ag::Var& in) { return ffn_(in); });
}

ag::Var DecoderLayer::step(const ag::Var& y, nn::KeyValueCache& self, const nn::KeyValueCache& cross,
                           const Tensor& src_padding) const {
  DropoutStream no_dropout;
  ag::Var h = residual_(self_attn_norm_, y, no_dropout, [&](const ag::Var& in) { return self_attn_.step(in, self); });
  h = residual_(cross_attn_norm_, h, no_dropout,
                [&](const ag::Var& in) { return cross_attn_.attend_cached(in, cross, src_padding); });
  return residual_(ffn_norm_, h, no_dropout, [&](const ag::Var& in) { return ffn_(in); });
}

std::vector<nn::Parameter> DecoderLayer::parameters() const {
  std::vector<nn::Parameter> all = self_attn_.parameters();
  for (const auto& more : {self_attn_norm_.parameters(), cross_attn_.parameters(), cross_attn_norm_.parameters(),
                           ffn_.parameters(), ffn_norm_.parameters()})
    nn::append(all, more);
  return all;
}

}  // namespace tessera::models
