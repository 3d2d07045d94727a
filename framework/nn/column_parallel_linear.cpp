#include "nn/column_parallel_linear.h"

#include "autograd/ops.h"
#include "dist/parallel_ops.h"
#include "kernels/dispatch.h"

namespace tessera::nn {
namespace {

// Every rank's block of the last dimension, concatenated in rank order; backward keeps this
// rank's block of the gradient.
ag::Var gather_last_dim(const ag::Var& x, dist::Communicator& group) {
  const Shape shape = x.shape();
  const std::int64_t n = shape.back(), rows = x.value().numel() / n, parts = group.size();
  const Tensor blocks = group.all_gather(x.value().reshape({rows, n}));  // [parts * rows, n]
  Shape full = shape;
  full.back() = n * parts;
  const Tensor value = kernels::permute(blocks.reshape({parts, rows, n}), {1, 0, 2}).reshape(full);
  const int rank = group.rank();
  return ag::make_result(value, "gather_from_tensor_parallel", {x}, [=](const Tensor& grad) {
    const Tensor by_rank = kernels::permute(grad.reshape({rows, parts, n}), {1, 0, 2});  // [parts, rows, n]
    return std::vector<Tensor>{by_rank.narrow_rows(rank, 1).clone().reshape(shape)};
  });
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const std::string& name, std::int64_t in, std::int64_t out,
                                           std::uint64_t seed, const Placement& placement, bool gather_output)
    : local_(name, in, out, seed, placement, dist::ShardDim::rows, dist::ShardDim::rows),
      group_(placement.tensor_parallel_size() > 1 ? placement.tensor_parallel : nullptr),
      gather_output_(gather_output) {}

ag::Var ColumnParallelLinear::enter(const ag::Var& x) const {
  return group_ != nullptr ? dist::copy_to_tensor_parallel(x, *group_) : x;
}

ag::Var ColumnParallelLinear::forward_entered(const ag::Var& x) const {
  const ag::Var y = local_(x);
  return gather_output_ && group_ != nullptr ? gather_last_dim(y, *group_) : y;
}

ag::Var ColumnParallelLinear::forward_relu(const ag::Var& x) const {
  if (gather_output_ && group_ != nullptr) return ag::relu((*this)(x));
  return local_.forward_relu(enter(x));
}

}  // namespace tessera::nn
