// Layer normalization (Ba et al. 2016) over the last dimension, with a learned gain and bias.
#pragma once

#include <string>
#include <vector>

#include "nn/parameter.h"

namespace tessera::nn {

class LayerNorm {
 public:
  LayerNorm() = default;
  // Parameters `name`.weight (ones) and `name`.bias (zeros) of `features`, replicated. They stay
  // in the placement's dtype under mixed precision.
  LayerNorm(const std::string& name, std::int64_t features, double eps, const Placement& placement);

  // (x - mean) / sqrt(var + eps) * weight + bias, x [..., features].
  ag::Var operator()(const ag::Var& x) const;

  std::vector<Parameter> parameters() const { return {gamma_, beta_}; }

 private:
  Parameter gamma_, beta_;
  double eps_ = 1e-5;
};

}  // namespace tessera::nn
