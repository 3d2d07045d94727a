// Megatron-LM's RowParallelLinear (Shoeybi et al. 2019, section 3): the input features are split
// over the tensor-parallel group, each rank holding a block of W's columns. Its input is this
// rank's block of features (a column-parallel layer's output); the partial products leave the
// parallel region through reduce_from_tensor_parallel (all-reduced forward, identity backward)
// and the replicated bias is added once, after the sum.
#pragma once

#include <string>
#include <vector>

#include "nn/linear.h"

namespace tessera::nn {

class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  // The full layer's W and b are drawn as Linear's (from `seed`); this rank keeps in / tp columns.
  RowParallelLinear(const std::string& name, std::int64_t in, std::int64_t out, std::uint64_t seed,
                    const Placement& placement);

  // x [..., in / tp] -> [..., out], replicated.
  ag::Var operator()(const ag::Var& x) const;

  std::vector<Parameter> parameters() const { return local_.parameters(); }

 private:
  Linear local_;  // this rank's columns of W; all of b
  dist::Communicator* group_ = nullptr;
};

}  // namespace tessera::nn
