// Token embeddings, scaled by sqrt(d_model) as in Vaswani et al. (2017), section 3.4.
#pragma once

#include <string>
#include <vector>

#include "nn/parameter.h"

namespace tessera::nn {

class Embedding {
 public:
  Embedding() = default;
  // Parameter `name`.weight [vocab, d_model] ~ N(0, d_model^-1/2) from `seed`, replicated.
  Embedding(const std::string& name, std::int64_t vocab, std::int64_t d_model, std::uint64_t seed,
            const Placement& placement);

  // int32 ids [...] -> sqrt(d_model) * rows [..., d_model] in the compute dtype (the rows are taken
  // from the table in its own dtype, so that its gradient stays there).
  ag::Var operator()(const Tensor& ids) const;

  // The table [vocab, d_model] (the pre-softmax weights when tied).
  const ag::Var& weight() const { return weight_.var; }
  std::vector<Parameter> parameters() const { return {weight_}; }

 private:
  Parameter weight_;
  std::int64_t d_model_ = 0;
  DType compute_ = DType::f32;
};

}  // namespace tessera::nn
