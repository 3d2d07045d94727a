// The model's shape and the decoding settings from a run's config.
#pragma once

#include <cstdint>

#include "io/run_config.h"
#include "models/decoding.h"
#include "models/transformer.h"

namespace tessera::models {

// The model's shape on the CPU in float32 (translation, averaging, benchmarks).
TransformerConfig model_config(const io::RunConfig& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab);
// The same on train.device with train.precision (training).
TransformerConfig training_model_config(const io::RunConfig& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab);
DecodeOptions decode_options(const io::DecodeConfig& decode);

}  // namespace tessera::models
