#include "nn/embedding.h"

#include <cmath>

#include "autograd/ops.h"
#include "nn/init.h"

namespace tessera::nn {

Embedding::Embedding(const std::string& name, std::int64_t vocab, std::int64_t d_model, std::uint64_t seed,
                     const Placement& placement, bool vocab_parallel)
    : d_model_(d_model),
      compute_(placement.compute),
      group_(vocab_parallel && placement.tensor_parallel_size() > 1 ? placement.tensor_parallel : nullptr),
      block_{0, vocab, vocab} {
  if (group_ != nullptr) block_ = dist::vocab_block(vocab, *group_);
  weight_ = make_parameter(name + ".weight", embedding_normal(vocab, d_model, seed),
                           group_ != nullptr ? dist::ShardDim::rows : dist::ShardDim::replicated, placement);
}

ag::Var Embedding::operator()(const Tensor& ids) const {
  const ag::Var rows = group_ != nullptr ? dist::vocab_parallel_embedding(weight_.var, ids, block_, *group_)
                                         : ag::embedding(weight_.var, ids);
  return ag::scale(ag::cast(rows, compute_), std::sqrt(static_cast<double>(d_model_)));
}

}  // namespace tessera::nn
