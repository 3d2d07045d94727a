// Vocabulary parallelism (Megatron-LM's VocabParallelEmbedding and vocab_parallel_cross_entropy,
// Shoeybi et al. 2019, section 3): each rank of a tensor-parallel group holds a contiguous block
// of the vocabulary's rows of the embedding (and of the tied output projection), so that no rank
// holds the whole table or the logits over the whole vocabulary.
#pragma once

#include <cstdint>

#include "autograd/var.h"
#include "dist/communicator.h"

namespace tessera::dist {

// This rank's ids [first, first + count) of a vocabulary of `vocab` ids (block_range's blocks:
// the first vocab % size ranks hold one row more).
struct VocabBlock {
  std::int64_t first = 0, count = 0, vocab = 0;
};
VocabBlock vocab_block(std::int64_t vocab, const Communicator& group);

// The rows for int32 ids [...] of the whole vocabulary, [..., d], from this rank's block of the
// table [count, d]: each rank looks up its own ids (zeros for the others') and the group sums.
// Backward: each rank's block gets the gradient of its own ids' rows.
ag::Var vocab_parallel_embedding(const ag::Var& block_table, const Tensor& ids, const VocabBlock& block,
                                 Communicator& group);

// ag::cross_entropy (label-smoothed, summed over the rows; rows whose target is ignore_index add
// nothing) of logits [N, count] that are this rank's block of the columns of logits [N, vocab]:
// the ranks exchange 4 statistics per row (max, sum of exp, sum of logits, the target's logit)
// and each computes the whole rows' loss; backward is local. `nll_sum`: the unsmoothed NLL's sum.
ag::Var vocab_parallel_cross_entropy(const ag::Var& logits, const Tensor& targets, double smoothing,
                                     std::int32_t ignore_index, const VocabBlock& block, Communicator& group,
                                     double* nll_sum = nullptr);

// The logits [rows, vocab] from every rank's block [rows, count] (decoding's per-step logits).
Tensor gather_vocab_logits(const Tensor& block_logits, Communicator& group);

}  // namespace tessera::dist
