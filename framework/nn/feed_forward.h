// The position-wise feed-forward network, FFN(x) = max(0, x W1^T + b1) W2^T + b2 (Vaswani et al.
// 2017, section 3.3). Under tensor parallelism fc1 is column-parallel and fc2 row-parallel, so
// each rank holds d_ff / tp hidden units and the pair costs one all-reduce each way.
#pragma once

#include <string>
#include <vector>

#include "nn/column_parallel_linear.h"
#include "nn/row_parallel_linear.h"

namespace tessera::nn {

class FeedForward {
 public:
  FeedForward() = default;
  // Parameters `prefix`.fc1.{weight,bias} and `prefix`.fc2.{weight,bias}; the weights draw from
  // next_seed and next_seed + 1, which it advances past.
  FeedForward(const std::string& prefix, std::int64_t d_model, std::int64_t d_ff, std::uint64_t& next_seed,
              const Placement& placement);

  // x [..., d_model] -> [..., d_model].
  ag::Var operator()(const ag::Var& x) const;

  std::vector<Parameter> parameters() const;

 private:
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
};

}  // namespace tessera::nn
