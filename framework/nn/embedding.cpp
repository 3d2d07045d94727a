#include "nn/embedding.h"

#include <cmath>

#include "autograd/ops.h"
#include "nn/init.h"

namespace tessera::nn {

Embedding::Embedding(const std::string& name, std::int64_t vocab, std::int64_t d_model, std::uint64_t seed,
                     const Placement& placement)
    : weight_(make_parameter(name + ".weight", embedding_normal(vocab, d_model, seed), dist::ShardDim::replicated,
                             placement)),
      d_model_(d_model),
      compute_(placement.compute) {}

ag::Var Embedding::operator()(const Tensor& ids) const {
  return ag::scale(ag::cast(ag::embedding(weight_.var, ids), compute_), std::sqrt(static_cast<double>(d_model_)));
}

}  // namespace tessera::nn
