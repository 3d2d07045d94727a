// Megatron-LM's ColumnParallelLinear (Shoeybi et al. 2019, section 3): the output features are
// split over the tensor-parallel group, each rank holding a block of W's rows and of b. Its input
// enters the parallel region through copy_to_tensor_parallel (identity forward, gradient
// all-reduced backward); its output is this rank's block of features, or all of them gathered.
#pragma once

#include <string>
#include <vector>

#include "nn/linear.h"

namespace tessera::nn {

class ColumnParallelLinear {
 public:
  ColumnParallelLinear() = default;
  // The full layer's W and b are drawn as Linear's (from `seed`); this rank keeps out / tp rows.
  ColumnParallelLinear(const std::string& name, std::int64_t in, std::int64_t out, std::uint64_t seed,
                       const Placement& placement, bool gather_output = false);

  // x [..., in] (replicated) -> [..., out / tp] (or [..., out] gathered).
  ag::Var operator()(const ag::Var& x) const { return forward_entered(enter(x)); }
  // Several column-parallel layers reading one input enter it once (one all-reduce backward)...
  ag::Var enter(const ag::Var& x) const;
  // ...then each applies itself to the entered input.
  ag::Var forward_entered(const ag::Var& x) const;
  // relu of operator()'s output, fused into the layer when the output stays split (relu is elementwise).
  ag::Var forward_relu(const ag::Var& x) const;

  std::vector<Parameter> parameters() const { return local_.parameters(); }

 private:
  Linear local_;  // this rank's rows of W and b
  dist::Communicator* group_ = nullptr;
  bool gather_output_ = false;
};

}  // namespace tessera::nn
