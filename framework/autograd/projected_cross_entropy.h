// The output projection and the label-smoothed cross entropy in one op, computed a block of rows
// at a time so that the [N, V] logits are never materialised (CPU).
#pragma once

#include <cstdint>

#include "autograd/var.h"

namespace tessera::ag {

// Rows per block: a block's logits [rows, V] stay near the cache instead of one [N, V] array
// written, read and rewritten by separate passes.
inline constexpr std::int64_t kProjectedCrossEntropyRows = 256;

// cross_entropy(matmul(h, w, false, true), targets, ...) for h [N, d] and w [V, d] on the CPU,
// with the same per-row losses. When a gradient is wanted it is computed during the forward,
// block by block (the softmax of a block is at hand), and backward only scales it by the
// incoming gradient; so dh and dw may differ from the unfused op's in the last bits.
Var projected_cross_entropy(const Var& h, const Var& w, const Tensor& targets, double smoothing,
                            std::int32_t ignore_index, double* nll_sum = nullptr,
                            std::int64_t block_rows = kProjectedCrossEntropyRows);

}  // namespace tessera::ag
