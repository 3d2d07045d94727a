// The loss of given pairs under teacher forcing (the decoder reads the reference): what training's
// validation reports and what `tessera score --metrics loss ppl` prints.
#pragma once

#include <cstdint>

#include "data/examples.h"
#include "dist/communicator.h"
#include "models/transformer.h"
#include "train/step_log.h"

namespace tessera::train {

// The summed label-smoothed loss, NLL and target tokens of `pairs`, batched by `batch_tokens` in
// their order, without dropout. With `replicas` (every rank of it calls this, each holding the same
// model) every replica takes every replicas-th batch; the sums are the same as one process's, bit for
// bit, since each batch's sums are added up in batch order.
LossSums forced_decoding_loss(const models::Transformer& model, const data::ExampleSet& pairs,
                              std::int64_t batch_tokens, double smoothing, dist::Communicator* replicas);

}  // namespace tessera::train
