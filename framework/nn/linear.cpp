#include "nn/linear.h"

#include "autograd/ops.h"
#include "nn/init.h"

namespace tessera::nn {

Linear::Linear(const std::string& name, std::int64_t in, std::int64_t out, std::uint64_t seed,
               const Placement& placement, dist::ShardDim weight_shard, dist::ShardDim bias_shard)
    : weight_(make_parameter(name + ".weight", xavier_uniform(out, in, seed), weight_shard, placement)),
      bias_(make_parameter(name + ".bias", Tensor::zeros({out}), bias_shard, placement)),
      compute_(placement.compute) {
  keep_compute_copy(weight_.var, placement);
  keep_compute_copy(bias_.var, placement);
}

ag::Var Linear::operator()(const ag::Var& x) const {
  const ag::Var w = ag::compute_copy(weight_.var, compute_), b = ag::compute_copy(bias_.var, compute_);
  return ag::linear(x, w, b);
}

ag::Var Linear::forward_relu(const ag::Var& x) const {
  const ag::Var w = ag::compute_copy(weight_.var, compute_), b = ag::compute_copy(bias_.var, compute_);
  return ag::linear_relu(x, w, b);
}

}  // namespace tessera::nn
