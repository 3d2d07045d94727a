// The two autograd ops of Megatron-style tensor parallelism (Shoeybi et al. 2019, section 3):
// around a column-parallel then row-parallel pair of linear layers, `f` enters the parallel
// region and `g` leaves it.
#pragma once

#include "autograd/var.h"
#include "dist/communicator.h"

namespace tessera::dist {

// f: identity forward; backward all-reduces (sums) the gradient over the tensor-parallel group,
// since every rank's partial branch contributed to the replicated input's gradient.
ag::Var copy_to_tensor_parallel(const ag::Var& x, Communicator& group);

// g: all-reduces (sums) the partial outputs forward; identity backward.
ag::Var reduce_from_tensor_parallel(const ag::Var& x, Communicator& group);

}  // namespace tessera::dist
