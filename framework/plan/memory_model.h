// The memory and step-time model of one training rank: what `tessera plan` prints and what train's
// pre-flight check compares with the memory a rank can use (one code path for both).
//
// Memory is counted tensor by tensor, as the allocator hands out blocks (each rounded up to its
// size class), from what the autograd graph keeps: every op's output that a later op consumed,
// and what a backward captured besides (layer norm's mean and rstd, attention's log-sum-exp), until
// backward passes that op. Batches are taken as full: batch_tokens / parallel.data token slots
// per rank on each side (source and target); real batches fill a little less, so this is an upper
// bound (under data parallelism a rank's share of a batch's rows may hold one sentence more than
// batch_tokens / data: 32 slots are added). The peak is the larger of two moments of a step:
// - backward's start: parameters, optimizer state, every activation, the logits, their gradient
//   and the output layer's weight gradient;
// - backward's end: parameters, optimizer state and every parameter's gradient, plus one
//   embedding's dense gradient in flight and the logits (the step's view of them keeps them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/run_config.h"

namespace tessera::plan {

// The Transformer's shape (as models::TransformerConfig, without the runtime's fields).
struct ModelShape {
  std::int64_t src_vocab = 0, tgt_vocab = 0, layers = 6, d_model = 512, d_ff = 2048, heads = 8;
  std::int64_t max_positions = 1024;  // rows of the sinusoidal table
  bool dropout = true, pre_norm = false, share_embeddings = true, tie_output = true;
};

// How the work is split and stored; the config's parallel.* and train.* keys of the same names.
struct Layout {
  std::int64_t tensor = 1, data = 1;
  bool zero = false;       // parallel.zero: 1 (Adam moments split over the data-parallel ranks)
  bool recompute = false;  // train.recompute: layer
  bool vocab_parallel = false;
  bool bf16 = false;  // train.precision: bf16 (GPU): bfloat16 activations and weight copies
  bool gpu = false;   // train.device: cuda
};

// One line of the breakdown: what it is, and its bytes per rank.
struct Item {
  std::string name;
  double bytes = 0;
};

struct MemoryEstimate {
  std::int64_t tokens_per_rank = 0;  // token slots per side and rank in one batch
  std::int64_t parameters = 0;       // this rank's parameter count
  double parameter_bytes = 0;        // fp32 weights (+ their bfloat16 copies under bf16)
  double gradient_bytes = 0;         // fp32, all of this rank's parameters (end of backward)
  double optimizer_bytes = 0;        // Adam's two moments (1/dp of them under zero)
  double bucket_bytes = 0;           // data parallelism's flat gradient buckets
  double table_bytes = 0;            // the positional table
  double activation_bytes = 0;       // kept for backward, with the layout's recomputation
  double activation_bytes_no_recompute = 0;
  double activation_bytes_recompute = 0;
  double logits_bytes = 0;    // the largest transient: logits, their gradient, the output layer's gradient
  double peak_bytes = 0;      // the larger of backward's start and end
  bool peak_at_start = true;  // which of the two it is
};

MemoryEstimate estimate_memory(const ModelShape& model, const Layout& layout, std::int64_t batch_tokens);

// The step-time model: compute at a sustained FLOP rate plus communication in the alpha-beta model
// of ring collectives (an all-reduce of n bytes over p ranks: 2(p-1) steps of latency alpha and
// n/p bytes each at bandwidth beta), none of it overlapped.
struct Hardware {
  double tflops = 100;         // sustained training FLOP/s per GPU, in TFLOP/s
  double bandwidth_gbs = 100;  // per-link bandwidth of the collectives, in GB/s (1e9 bytes)
  double latency_us = 10;      // per-step latency of the collectives, in microseconds
};

struct StepEstimate {
  double flops = 0;  // this rank's FLOPs per batch (forward + backward, + recompute)
  double compute_s = 0;
  double data_bytes = 0;    // data-parallel bytes sent per rank per batch (all-reduce, or
  double data_s = 0;        // zero's reduce-scatter + all-gather: the same volume)
  double tensor_bytes = 0;  // tensor-parallel bytes sent per rank per batch
  double tensor_s = 0;
  double step_s = 0;  // compute + communication for one batch (train.accumulate: per batch)
};

StepEstimate estimate_step(const ModelShape& model, const Layout& layout, std::int64_t batch_tokens,
                           const Hardware& hw);

// Alpha-beta times of ring collectives over p ranks (0 for p == 1).
double ring_all_reduce_seconds(double bytes, std::int64_t ranks, const Hardware& hw);
double ring_all_gather_seconds(double bytes, std::int64_t ranks, const Hardware& hw);

// The shape and layout a config asks for, with the given vocabulary sizes.
ModelShape model_shape(const io::RunConfig& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab);
Layout layout_of(const io::RunConfig& cfg);

// The paper's base and big models (Table 3) with a 37,000-entry shared vocabulary.
ModelShape paper_model(const std::string& name);

// Bytes as "31.8 GiB" (one decimal), or whole MiB under 1 GiB, or whole KiB under 1 MiB.
std::string format_bytes(double bytes);

}  // namespace tessera::plan
