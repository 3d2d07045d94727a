// What every nn layer shares: where its parameters live, how each is split over the
// tensor-parallel group, and how a parameter is made from its full (single-process) value.
#pragma once

#include <string>
#include <vector>

#include "autograd/var.h"
#include "dist/communicator.h"
#include "dist/sharding.h"

namespace tessera::nn {

// Where a layer's parameters live and the dtype its products run in.
struct Placement {
  DType dtype = DType::f32;                       // of the parameters
  Device device = Device::cpu;                    // of the parameters and every op
  DType compute = DType::f32;                     // weights are cast to it for products (mixed precision)
  dist::Communicator* tensor_parallel = nullptr;  // the group sharded parameters split over; null: none

  int tensor_parallel_size() const { return tensor_parallel != nullptr ? tensor_parallel->size() : 1; }
  int tensor_parallel_rank() const { return tensor_parallel != nullptr ? tensor_parallel->rank() : 0; }
};

// A trainable tensor and how it is split over the tensor-parallel group (replicated without one).
struct Parameter {
  ag::Var var;
  dist::ShardDim shard = dist::ShardDim::replicated;
  std::int64_t whole_numel = 0;  // elements of the whole (unsplit) tensor
};

// The parameter `name` from its full value `init`, drawn as in a single process: this rank keeps
// its block along `shard`, in the placement's dtype and device.
Parameter make_parameter(const std::string& name, const Tensor& init, dist::ShardDim shard, const Placement& placement);

// Under mixed precision (compute != dtype), `p` keeps its value in the compute dtype for the
// products that use it (ag::compute_copy), refreshed by the optimizer; otherwise nothing.
void keep_compute_copy(const ag::Var& p, const Placement& placement);

// Appends `more` to `all` (layers list their sub-layers' parameters in construction order).
void append(std::vector<Parameter>& all, const std::vector<Parameter>& more);

}  // namespace tessera::nn
