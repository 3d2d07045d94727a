#include "nn/layer_norm.h"

#include "autograd/ops.h"

namespace tessera::nn {

LayerNorm::LayerNorm(const std::string& name, std::int64_t features, double eps, const Placement& placement)
    : gamma_(make_parameter(name + ".weight", Tensor::ones({features}), dist::ShardDim::replicated, placement)),
      beta_(make_parameter(name + ".bias", Tensor::zeros({features}), dist::ShardDim::replicated, placement)),
      eps_(eps) {}

ag::Var LayerNorm::operator()(const ag::Var& x) const { return ag::layer_norm(x, gamma_.var, beta_.var, eps_); }

}  // namespace tessera::nn
