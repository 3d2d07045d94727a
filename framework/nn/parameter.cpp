#include "nn/parameter.h"

namespace tessera::nn {

Parameter make_parameter(const std::string& name, const Tensor& init, dist::ShardDim shard,
                         const Placement& placement) {
  const int parts = placement.tensor_parallel_size();
  Tensor value =
      dist::take_block(init, shard, placement.tensor_parallel_rank(), parts).to(placement.dtype).to(placement.device);
  return {ag::Var::parameter(std::move(value), name), parts > 1 ? shard : dist::ShardDim::replicated, init.numel()};
}

void keep_compute_copy(const ag::Var& p, const Placement& placement) {
  if (placement.compute == placement.dtype) return;
  ag::Var handle = p;
  handle.keep_compute_copy(placement.compute);
}

void append(std::vector<Parameter>& all, const std::vector<Parameter>& more) {
  all.insert(all.end(), more.begin(), more.end());
}

}  // namespace tessera::nn
