#include "models/transformer_config.h"

#include <fmt/ranges.h>

#include <string>
#include <vector>

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

}  // namespace tessera::models
