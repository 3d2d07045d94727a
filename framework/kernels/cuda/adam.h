// The fused CUDA Adam: every parameter updated in one launch (the CPU twin: cpu::adam_update,
// bit-identical in float32). Master weights, gradients and moments are float32 CUDA tensors; an
// optional bfloat16 copy of each weight is refreshed in the same pass (mixed precision).
#pragma once

#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

using kernels::AdamParam;

class FusedAdam {
 public:
  // The parameters are fixed for the optimizer's life: their chunk table is built once.
  explicit FusedAdam(std::vector<AdamParam> params);
  // Update t (1-based) with learning rate lr.
  void step(double lr, double beta1, double beta2, double eps, long t);
  const std::vector<AdamParam>& params() const { return params_; }

 private:
  std::vector<AdamParam> params_;
  Tensor table_;  // the device tables below, in one allocation
  const AdamSegment* segments_ = nullptr;
  const std::int32_t* chunk_segment_ = nullptr;
  const std::int64_t* chunk_start_ = nullptr;
  std::int64_t chunks_ = 0;
};

}  // namespace tessera::cuda
