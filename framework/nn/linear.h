// A fully connected layer, y = x W^T + b, with W [out, in] (PyTorch's layout) and b [out].
#pragma once

#include <string>
#include <vector>

#include "nn/parameter.h"

namespace tessera::nn {

class Linear {
 public:
  Linear() = default;
  // W is Xavier-uniform from `seed`, b zeros; parameters `name`.weight and `name`.bias. The
  // tensor-parallel layers build on it with W and b as one block of the full layer's.
  Linear(const std::string& name, std::int64_t in, std::int64_t out, std::uint64_t seed, const Placement& placement,
         dist::ShardDim weight_shard = dist::ShardDim::replicated,
         dist::ShardDim bias_shard = dist::ShardDim::replicated);

  // x [..., in] -> [..., out], the product in the placement's compute dtype.
  ag::Var operator()(const ag::Var& x) const;
  // relu(x W^T + b) as one op (bias and activation in one pass over the product).
  ag::Var forward_relu(const ag::Var& x) const;

  const ag::Var& weight() const { return weight_.var; }
  const ag::Var& bias() const { return bias_.var; }
  DType compute() const { return compute_; }
  std::vector<Parameter> parameters() const { return {weight_, bias_}; }

 private:
  Parameter weight_, bias_;
  DType compute_ = DType::f32;
};

}  // namespace tessera::nn
