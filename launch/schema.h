// The one schema of Tessera's experiment configs (configs/*.yaml): every key typed, with its
// default, allowed range and one-line description.
#pragma once

#include "io/config.h"
#include "models/decoding.h"
#include "models/transformer.h"

namespace tessera::launch {

const io::Schema& tessera_schema();

// The model's shape from the config, on the CPU in float32 (translation, averaging, benchmarks).
models::TransformerConfig model_config(const io::Config& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab);
// The same on train.device with train.precision (training).
models::TransformerConfig training_model_config(const io::Config& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab);
models::DecodeOptions decode_options(const io::Config& cfg);

}  // namespace tessera::launch
