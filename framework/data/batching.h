// Token-count batching: sentences grouped by length inside a shuffled window so padding stays low.
// Deterministic for a seed; the position can be saved and restored (for checkpoints).
#pragma once

#include <cstdint>
#include <vector>

#include "data/examples.h"
#include "tensor/tensor.h"

namespace tessera::data {

struct Batch {
  Tensor src;                                   // int32 [B, Ls]: source ids + eos, padded with kPadId
  Tensor src_padding;                           // int32 [B, Ls]: 1 where src is padding
  Tensor tgt_in;                                // int32 [B, Lt]: bos + target ids (decoder input), padded
  Tensor tgt_out;                               // int32 [B, Lt]: target ids + eos (what to predict), padded with kPadId
  std::vector<std::int64_t> indices;            // which examples, in row order
  std::int64_t src_tokens = 0, tgt_tokens = 0;  // non-padding tokens (tgt: of tgt_out)
  std::int64_t padded_slots = 0;                // B*Ls + B*Lt
  double padding_fraction() const;
};

// Builds one batch from the given examples (in the given order).
Batch make_batch(const ExampleSet& examples, const std::vector<std::int64_t>& indices);

struct BatcherOptions {
  std::int64_t batch_tokens = 4096;  // per batch: rows * max(Ls, Lt) <= batch_tokens (at least one row)
  std::uint64_t seed = 1;
  bool shuffle = true;        // false: corpus order, sorted by length within windows off
  std::int64_t window = 100;  // batches' worth of examples sorted by length together
};

class Batcher {
 public:
  Batcher(const ExampleSet* examples, BatcherOptions opt);
  // The next batch of the current epoch; false (and the epoch advances) when the epoch ends.
  bool next(Batch& out);
  std::int64_t epoch() const { return epoch_; }        // 0-based, counts completed epochs
  std::int64_t position() const { return position_; }  // batches already returned this epoch
  // Restores the state saved as (epoch, position): the following batches are exactly those an
  // uninterrupted run would have produced.
  void seek(std::int64_t epoch, std::int64_t position);
  std::int64_t batches_per_epoch() const;

 private:
  // The epoch's batches, compactly (a corpus of 20M pairs takes 80 MB here, on every rank): the
  // examples in batch order, 4 bytes each, and each batch as a span of that order.
  struct Span {
    std::uint32_t begin, end;
  };
  void plan_epoch();
  void cut(std::uint32_t first, std::uint32_t last);
  const ExampleSet* examples_;
  BatcherOptions opt_;
  std::vector<std::uint32_t> order_;
  std::vector<Span> plan_;
  std::int64_t epoch_ = 0, position_ = 0;
};

}  // namespace tessera::data
