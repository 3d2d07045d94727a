#include "dist/parallel_ops.h"

namespace tessera::dist {

ag::Var copy_to_tensor_parallel(const ag::Var& x, Communicator& group) {
  if (group.size() == 1) return x;
  Communicator* g = &group;
  return ag::make_result(x.value(), "copy_to_tensor_parallel", {x}, [g](const Tensor& grad) {
    Tensor sum = grad.clone();
    g->all_reduce(sum, ReduceOp::sum);
    return std::vector<Tensor>{sum};
  });
}

ag::Var reduce_from_tensor_parallel(const ag::Var& x, Communicator& group) {
  if (group.size() == 1) return x;
  Tensor sum = x.value().clone();
  group.all_reduce(sum, ReduceOp::sum);
  return ag::make_result(sum, "reduce_from_tensor_parallel", {x},
                         [](const Tensor& grad) { return std::vector<Tensor>{grad}; });
}

}  // namespace tessera::dist
