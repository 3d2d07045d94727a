// How a tensor is laid out over a tensor-parallel group: whole on every rank, or one rank's
// block of the rows (dim 0) or columns (dim 1) of the full logical tensor.
#pragma once

#include "dist/communicator.h"
#include "tensor/tensor.h"

namespace tessera::dist {

enum class ShardDim { replicated = -1, rows = 0, columns = 1 };

// Block `part` of an extent split over `parts` ranks: contiguous, in rank order, the first
// extent % parts blocks one longer (equal blocks when the extent divides; a vocabulary need not).
struct BlockRange {
  std::int64_t start = 0, count = 0;
};
BlockRange block_range(std::int64_t extent, int part, int parts);

// Block `part` of `parts` blocks along `dim` (block_range's; a copy; `t` itself when replicated or
// parts == 1). 1-D tensors split along their only dimension.
Tensor take_block(const Tensor& t, ShardDim dim, int part, int parts);

}  // namespace tessera::dist
