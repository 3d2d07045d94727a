// The MPI tests' model: small enough to compare against one process in float64 quickly, with
// heads and d_ff that split over up to 4 tensor-parallel ranks.
#pragma once

#include "models/transformer.h"

namespace tessera {

inline models::TransformerConfig tiny_config() {
  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 24;
  c.encoder_layers = c.decoder_layers = 2;
  c.d_model = 16;
  c.d_ff = 32;
  c.heads = 4;
  c.dropout = 0.0;
  c.dtype = DType::f64;
  return c;
}

}  // namespace tessera
