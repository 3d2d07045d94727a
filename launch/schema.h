// The one schema of Tessera's experiment configs (configs/*.yaml): every key typed, with its
// default, allowed range and one-line description.
#pragma once

#include <string>
#include <vector>

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

// A key whose value differs between two configs: `first` in the one, `second` in the other.
struct KeyDifference {
  std::string key, first, second;
};
// The keys that shape the model's parameters (their names and shapes) and differ between two
// configs: layers, widths, the norms' place, embedding sharing and tying, and the kind of task
// (the synthetic tasks share one shape, set by data.synthetic_vocab). model.heads is not one: the
// same weights split into other heads (another function, with the same shapes).
std::vector<KeyDifference> model_shape_differences(const io::Config& first, const io::Config& second);

}  // namespace tessera::launch
