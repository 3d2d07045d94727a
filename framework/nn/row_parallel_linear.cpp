#include "nn/row_parallel_linear.h"

#include "autograd/ops.h"
#include "dist/parallel_ops.h"

namespace tessera::nn {

RowParallelLinear::RowParallelLinear(const std::string& name, std::int64_t in, std::int64_t out, std::uint64_t seed,
                                     const Placement& placement)
    : local_(name, in, out, seed, placement, dist::ShardDim::columns, dist::ShardDim::replicated),
      group_(placement.tensor_parallel_size() > 1 ? placement.tensor_parallel : nullptr) {}

ag::Var RowParallelLinear::operator()(const ag::Var& x) const {
  if (group_ == nullptr) return local_(x);
  const ag::Var w = ag::compute_copy(local_.weight(), local_.compute()),
                b = ag::compute_copy(local_.bias(), local_.compute());
  return ag::add(dist::reduce_from_tensor_parallel(ag::linear(x, w), *group_), b);
}

}  // namespace tessera::nn
