#include "plan/memory_model.h"

#include <fmt/core.h>

#include <algorithm>

#include "autograd/projected_cross_entropy.h"
#include "common/error.h"
#include "tensor/allocator.h"

namespace tessera::plan {
namespace {

constexpr int kF32 = 4;
// Sentence length for the attention FLOPs (scores and sums grow with it; WMT averages ~30 tokens).
constexpr double kTypicalLength = 32;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Bytes of `count` tensors of `elements` elements each, as the allocator's blocks.
double blocks(double count, std::int64_t elements, int element_bytes) {
  if (count <= 0 || elements <= 0) return 0;
  return count * static_cast<double>(allocation_block_size(static_cast<std::size_t>(elements * element_bytes)));
}

// One rank's sizes: d and its tensor-parallel shares, the token slots, the activations' bytes.
struct Dims {
  std::int64_t d = 0, d_local = 0, f_local = 0, heads_local = 0, tokens = 0, tp = 1;
  int act = kF32;  // bytes per activation element
  bool dropout = true, pre_norm = false, bf16 = false;
};

Dims dims_of(const ModelShape& m, const Layout& l, std::int64_t batch_tokens) {
  Dims d;
  d.d = m.d_model;
  d.tp = l.tensor;
  d.d_local = m.d_model / l.tensor;
  d.f_local = m.d_ff / l.tensor;
  d.heads_local = m.heads / l.tensor;
  // A batch's rows split over the replicas: the first takes the odd row, one sentence more than its share.
  d.tokens = ceil_div(batch_tokens, l.data) + (l.data > 1 ? static_cast<std::int64_t>(kTypicalLength) : 0);
  d.act = l.bf16 ? 2 : kF32;
  d.dropout = m.dropout;
  d.pre_norm = m.pre_norm;
  d.bf16 = l.bf16;
  return d;
}

// ---------------------------------------------------------------- parameters
struct ParamTensor {
  std::int64_t elements = 0;
  bool replicated = false;  // the same on every tensor-parallel rank (its gradient is broadcast)
  bool cast = false;        // a Linear's weight or bias: a bfloat16 copy feeds the GEMM under bf16
};

void add_linear(std::vector<ParamTensor>& p, std::int64_t in, std::int64_t out, std::int64_t tp, bool row_parallel) {
  if (row_parallel) {  // split by input columns; the bias is added after the all-reduce
    p.push_back({out * (in / tp), false, true});
    p.push_back({out, true, true});
  } else {  // split by output rows
    p.push_back({(out / tp) * in, false, true});
    p.push_back({out / tp, false, true});
  }
}

void add_attention(std::vector<ParamTensor>& p, std::int64_t d, std::int64_t tp) {
  for (int i = 0; i < 3; ++i) add_linear(p, d, d, tp, false);
  add_linear(p, d, d, tp, true);
}

void add_layer_norm(std::vector<ParamTensor>& p, std::int64_t d) {
  p.push_back({d, true, false});
  p.push_back({d, true, false});
}

void add_feed_forward(std::vector<ParamTensor>& p, std::int64_t d, std::int64_t f, std::int64_t tp) {
  add_linear(p, d, f, tp, false);
  add_linear(p, f, d, tp, true);
}

// Local rows of a vocabulary-sized table.
std::int64_t vocab_rows(std::int64_t vocab, const Layout& l) {
  return l.vocab_parallel ? ceil_div(vocab, l.tensor) : vocab;
}

std::vector<ParamTensor> parameter_tensors(const ModelShape& m, const Layout& l) {
  std::vector<ParamTensor> p;
  const std::int64_t d = m.d_model, tp = l.tensor;
  const bool split_vocab = l.vocab_parallel && tp > 1;
  p.push_back({vocab_rows(m.src_vocab, l) * d, !split_vocab, false});
  if (!m.share_embeddings) p.push_back({vocab_rows(m.tgt_vocab, l) * d, !split_vocab, false});
  if (!m.tie_output) p.push_back({vocab_rows(m.tgt_vocab, l) * d, !split_vocab, true});
  for (std::int64_t i = 0; i < m.layers; ++i) {
    add_attention(p, d, tp);
    add_layer_norm(p, d);
    add_feed_forward(p, d, m.d_ff, tp);
    add_layer_norm(p, d);
  }
  for (std::int64_t i = 0; i < m.layers; ++i) {
    for (int j = 0; j < 2; ++j) {
      add_attention(p, d, tp);
      add_layer_norm(p, d);
    }
    add_feed_forward(p, d, m.d_ff, tp);
    add_layer_norm(p, d);
  }
  if (m.pre_norm)
    for (int side = 0; side < 2; ++side) add_layer_norm(p, d);
  return p;
}

// ---------------------------------------------------------------- activations
// What one multi-head attention keeps for `tq` queries over `tkv` keys (self: the same tokens).
double attention_bytes(const Dims& x, std::int64_t tq, std::int64_t tkv, bool self) {
  const std::int64_t dl = x.d_local;
  // Q, K, V: the GEMM (its bias added in place), heads split.
  double b = self ? blocks(6, tq * dl, x.act) : blocks(2, tq * dl, x.act) + blocks(4, tkv * dl, x.act);
  b += blocks(2, tq * dl, x.act) + blocks(1, tq * x.heads_local, x.act);  // output, heads merged, log-sum-exp
  b += blocks(x.tp > 1 ? 3 : 1, tq * x.d, x.act);  // output projection (+ the all-reduce's sum, + bias)
  return b;
}

// A residual sub-layer's own tensors: layer norm (and its mean and rstd), dropout, the sum.
double residual_bytes(const Dims& x, std::int64_t t) {
  return blocks(x.dropout ? 3 : 2, t * x.d, x.act) + blocks(2, t, kF32);
}

double feed_forward_bytes(const Dims& x, std::int64_t t) {
  // fc1 with its bias and ReLU in place; fc2 (+ the all-reduce's sum, + bias)
  return blocks(1, t * x.f_local, x.act) + blocks(x.tp > 1 ? 3 : 1, t * x.d, x.act);
}

double encoder_layer_bytes(const Dims& x) {
  const std::int64_t t = x.tokens;
  return attention_bytes(x, t, t, true) + feed_forward_bytes(x, t) + 2 * residual_bytes(x, t);
}

double decoder_layer_bytes(const Dims& x) {
  const std::int64_t t = x.tokens;
  return attention_bytes(x, t, t, true) + attention_bytes(x, t, t, false) + feed_forward_bytes(x, t) +
         3 * residual_bytes(x, t);
}

// One side's embedding: the batch's ids, the lookup (float32; under vocabulary parallelism, the masked local lookup
// and its all-reduce), its bfloat16 copy, the scale by sqrt(d), + positions, dropout; pre-norm's
// final norm of that side.
double embedding_bytes(const Dims& x, const Layout& l) {
  const std::int64_t t = x.tokens;
  double b = blocks(2, t, 4);  // the batch's int32 ids and padding mask (or target input and output)
  b += blocks(l.vocab_parallel && l.tensor > 1 ? 2 : 1, t * x.d, kF32);
  if (x.bf16) b += blocks(1, t * x.d, x.act);
  b += blocks(x.dropout ? 3 : 2, t * x.d, x.act);
  return x.pre_norm ? b + blocks(1, t * x.d, x.act) + blocks(2, t, kF32) : b;  // + pre-norm's final norm
}

struct Activations {
  double full = 0, recompute = 0;
};

Activations activation_bytes(const ModelShape& m, const Layout& l, const Dims& x) {
  const double embeddings = 2 * embedding_bytes(x, l);
  const double layers = static_cast<double>(m.layers) * (encoder_layer_bytes(x) + decoder_layer_bytes(x));
  // Recomputation keeps each layer's input (and the encoder output the decoder attends to), and
  // during backward one layer's activations with a few gradients of its size.
  const double inputs = blocks(static_cast<double>(2 * m.layers + 1), x.tokens * x.d, x.act);
  const double one_layer =
      std::max(encoder_layer_bytes(x), decoder_layer_bytes(x)) + blocks(3, x.tokens * std::max(x.d, x.f_local), x.act);
  return {embeddings + layers, embeddings + inputs + one_layer};
}

// ---------------------------------------------------------------- step time
double layer_flops(const ModelShape& m, double tokens) {
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.d_ff), len = kTypicalLength;
  const double enc = tokens * (4 * d * d + 2 * d * f + 2 * len * d);
  const double dec = tokens * (6 * d * d + 2 * d * f + len * d + 2 * len * d) + tokens * 2 * d * d;
  return static_cast<double>(m.layers) * (enc + dec);
}

}  // namespace

MemoryEstimate estimate_memory(const ModelShape& m, const Layout& l, std::int64_t batch_tokens) {
  TESSERA_CHECK(l.tensor >= 1 && l.data >= 1 && m.heads % l.tensor == 0 && m.d_ff % l.tensor == 0,
                "plan: {} heads and d_ff {} do not split over {} tensor-parallel ranks", m.heads, m.d_ff, l.tensor);
  const Dims x = dims_of(m, l, batch_tokens);
  MemoryEstimate e;
  e.tokens_per_rank = x.tokens;
  double cast_elements = 0;
  for (const ParamTensor& p : parameter_tensors(m, l)) {
    e.parameters += p.elements;
    e.parameter_bytes += blocks(1, p.elements, kF32);
    if (p.cast) cast_elements += static_cast<double>(p.elements);
  }
  const std::int64_t vocab_local = vocab_rows(m.tgt_vocab, l);
  // bfloat16 copies of the weights, kept by the graph; a tied output layer casts the embedding too.
  if (l.bf16)
    e.parameter_bytes += 2 * (cast_elements + (m.tie_output ? static_cast<double>(vocab_local * m.d_model) : 0));
  e.gradient_bytes = 0;
  for (const ParamTensor& p : parameter_tensors(m, l)) e.gradient_bytes += blocks(1, p.elements, kF32);
  const std::int64_t moment_elements = l.zero ? ceil_div(e.parameters, l.data) : e.parameters;
  e.optimizer_bytes = l.zero ? blocks(2, moment_elements, kF32) : 2 * e.gradient_bytes;
  e.bucket_bytes = l.data > 1 ? e.gradient_bytes : 0;
  const Activations a = activation_bytes(m, l, x);
  e.activation_bytes_no_recompute = a.full;
  e.activation_bytes_recompute = a.recompute;
  e.activation_bytes = l.recompute ? a.recompute : a.full;
  // The logits and their gradient (on the CPU, ag::projected_cross_entropy's: a block of rows at a
  // time); the output layer's input gradient; its weight gradient and the float32 copy the
  // parameter keeps of it.
  const bool fused_loss = !l.gpu && !(l.vocab_parallel && l.tensor > 1);
  const std::int64_t logit_rows = fused_loss ? std::min(x.tokens, ag::kProjectedCrossEntropyRows) : x.tokens;
  e.logits_bytes = blocks(2, logit_rows * vocab_local, x.act) + blocks(1, x.tokens * x.d, x.act) +
                   blocks(1, vocab_local * m.d_model, x.act) + blocks(1, vocab_local * m.d_model, kF32);
  e.table_bytes = blocks(1, m.max_positions * m.d_model, x.act);
  const double held = e.parameter_bytes + e.optimizer_bytes + e.bucket_bytes + e.table_bytes;
  const double start = held + e.activation_bytes + e.logits_bytes;
  // Unfused, the logits stay to the end: the training step's reshaped view of them holds their storage.
  const double end = held + e.gradient_bytes + blocks(1, vocab_rows(m.src_vocab, l) * m.d_model, kF32) +
                     (fused_loss ? 0.0 : blocks(1, x.tokens * vocab_local, x.act));
  e.peak_at_start = start >= end;
  e.peak_bytes = std::max(start, end);
  return e;
}

double ring_all_reduce_seconds(double bytes, std::int64_t ranks, const Hardware& hw) {
  if (ranks <= 1) return 0;
  const auto p = static_cast<double>(ranks);
  return 2 * (p - 1) * (hw.latency_us * 1e-6 + bytes / p / (hw.bandwidth_gbs * 1e9));
}

double ring_all_gather_seconds(double bytes, std::int64_t ranks, const Hardware& hw) {
  if (ranks <= 1) return 0;
  const auto p = static_cast<double>(ranks);
  return (p - 1) * (hw.latency_us * 1e-6 + bytes / p / (hw.bandwidth_gbs * 1e9));
}

StepEstimate estimate_step(const ModelShape& m, const Layout& l, std::int64_t batch_tokens, const Hardware& hw) {
  const Dims x = dims_of(m, l, batch_tokens);
  const auto tokens = static_cast<double>(x.tokens), tp = static_cast<double>(l.tensor);
  StepEstimate s;
  // Forward + backward = 3 forwards of 2 FLOPs per multiply-add; recomputation adds a forward of the layers.
  const double layers = layer_flops(m, tokens) / tp;
  const double output = tokens * static_cast<double>(m.d_model * m.tgt_vocab) / (l.vocab_parallel ? tp : 1.0);
  s.flops = 2 * (3 * (layers + output) + (l.recompute ? layers : 0));
  s.compute_s = s.flops / (hw.tflops * 1e12);
  const MemoryEstimate mem = estimate_memory(m, l, batch_tokens);
  if (l.data > 1) {
    const auto p = static_cast<double>(l.data);
    s.data_bytes = 2 * (p - 1) / p * mem.gradient_bytes;
    s.data_s = ring_all_reduce_seconds(mem.gradient_bytes, l.data, hw);
  }
  if (l.tensor > 1) {
    // All-reduces of [tokens, d] per layer: forward 2 (encoder) and 3 (decoder); backward 2 and 4
    // (each parallel region's input gradient); recomputation repeats the forward's.
    const double per_layer = 5 + 6 + (l.recompute ? 5 : 0);
    const double n = tokens * static_cast<double>(m.d_model * x.act);
    const double count = static_cast<double>(m.layers) * per_layer + (l.vocab_parallel ? 2 : 0);
    double replicated = 0;
    for (const ParamTensor& p : parameter_tensors(m, l))
      if (p.replicated) replicated += static_cast<double>(p.elements * kF32);
    s.tensor_bytes = count * 2 * (tp - 1) / tp * n + replicated;
    s.tensor_s = count * ring_all_reduce_seconds(n, l.tensor, hw) + (tp - 1) * hw.latency_us * 1e-6 +
                 replicated / (hw.bandwidth_gbs * 1e9);  // a pipelined broadcast
  }
  s.step_s = s.compute_s + s.data_s + s.tensor_s;
  return s;
}

ModelShape model_shape(const io::RunConfig& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab) {
  const io::ModelConfig& c = cfg.model;
  return {.src_vocab = src_vocab,
          .tgt_vocab = tgt_vocab,
          .layers = c.layers,
          .d_model = c.d_model,
          .d_ff = c.d_ff,
          .heads = c.heads,
          .max_positions = c.max_positions,
          .dropout = c.dropout > 0,
          .pre_norm = c.norm == io::Norm::pre,
          .share_embeddings = c.share_embeddings,
          .tie_output = c.tie_output};
}

Layout layout_of(const io::RunConfig& cfg) {
  return {.tensor = cfg.parallel.tensor,
          .data = cfg.parallel.data,
          .zero = cfg.parallel.zero == 1,
          .recompute = cfg.train.recompute == io::Recompute::layer,
          .vocab_parallel = cfg.parallel.vocab_parallel,
          .bf16 = cfg.train.precision == io::Precision::bf16 && cfg.train.device == Device::cuda,
          .gpu = cfg.train.device == Device::cuda};
}

ModelShape paper_model(const std::string& name) {
  constexpr std::int64_t kVocab = 37000;
  if (name == "base") return {.src_vocab = kVocab, .tgt_vocab = kVocab, .d_model = 512, .d_ff = 2048, .heads = 8};
  if (name == "big") return {.src_vocab = kVocab, .tgt_vocab = kVocab, .d_model = 1024, .d_ff = 4096, .heads = 16};
  fail("plan: no paper model named '{}' (base or big)", name);
}

std::string format_bytes(double bytes) {
  constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", bytes / kGiB);
  return bytes >= kMiB ? fmt::format("{:.0f} MiB", bytes / kMiB) : fmt::format("{:.0f} KiB", bytes / 1024);
}

}  // namespace tessera::plan
