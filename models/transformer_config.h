// The Transformer's hyperparameters and where it runs, and their check.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace tessera::models {

struct TransformerConfig {
  std::int64_t src_vocab = 0, tgt_vocab = 0;
  std::int64_t encoder_layers = 6, decoder_layers = 6;
  std::int64_t d_model = 512, d_ff = 2048, heads = 8;
  double dropout = 0.1;          // on each sub-layer output and on embedding + position sums
  bool pre_norm = false;         // false: the paper's post-norm; true: norm inside each residual branch
  bool share_embeddings = true;  // one embedding for source and target (needs one shared vocabulary)
  bool tie_output = true;        // pre-softmax weights = target embedding
  double layer_norm_eps = 1e-5;
  std::int64_t max_positions = 1024;  // sinusoidal table size
  DType dtype = DType::f32;           // of parameters and activations (float64 for exact comparisons)
  Device device = Device::cpu;        // where parameters live and every op runs
  // Mixed precision (GPU only): bfloat16 copies of the float32 weights feed bfloat16 GEMMs and
  // activations; layer-norm parameters, the loss and the optimizer stay float32.
  bool bf16_compute = false;
  // train.recompute: layer: each encoder and decoder layer keeps only its inputs for backward and
  // runs its forward again there (ag::checkpoint): less memory, one more forward per step.
  bool recompute_layers = false;
  // Under tensor parallelism: the embeddings, the output projection and the logits split by
  // vocabulary rows over the group (parallel.vocab_parallel); no effect without a group.
  bool vocab_parallel = false;
  DType compute_dtype() const { return bf16_compute ? DType::bf16 : dtype; }
};

// Checks a config before any work (heads divide d_model, sizes positive, heads and d_ff divide
// by the tensor-parallel size, ...); throws naming the field.
void validate(const TransformerConfig& config, int tensor_parallel = 1);

}  // namespace tessera::models
