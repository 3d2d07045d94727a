// The parts of a training step that cross the process grid: each data-parallel replica's share of a
// global batch, replicated gradients kept equal over the tensor-parallel group, and the global
// gradient norm with clipping.
#pragma once

#include <vector>

#include "data/batching.h"
#include "data/examples.h"
#include "dist/communicator.h"
#include "models/transformer.h"
#include "optim/sharded_adam.h"
#include "tensor/tensor.h"

namespace tessera::train {

// This data-parallel replica's rows of a global batch of `set` (a contiguous, deterministic share).
data::Batch data_parallel_share(const data::Batch& b, const data::ExampleSet& set, dist::Communicator& replicas);

// Replicated parameters must stay bit-identical across the tensor-parallel group: their
// gradients are equal in exact arithmetic, and rank 0's are made everyone's.
void synchronize_replicated_gradients(const models::Transformer& model, dist::Communicator& tensor_group);

// The global norm of the gradients, sqrt(sum of squares), and when `clip` > 0 and the norm exceeds
// it every gradient scaled by clip / norm (in place). Under tensor parallelism the sharded ones'
// squares are summed over `tensor_group`, the replicated ones (the same on every rank) count once.
// With `blocks` (ZeRO-1: each of its ranks holds one block of the gradients) the squares are first
// summed over it.
double clip_gradient_norm(const std::vector<Tensor>& replicated, const std::vector<Tensor>& sharded,
                          dist::Communicator& tensor_group, double clip, dist::Communicator* blocks = nullptr);
// The same over a model's gradients.
double clip_gradients(const models::Transformer& model, dist::Communicator& tensor_group, double clip);

// ZeRO-1: the two above over this rank's blocks of the summed gradients (`adam`'s pieces). The
// tensor-parallel ranks of one data-parallel rank hold the same blocks.
void synchronize_replicated_blocks(const models::Transformer& model, const optim::ShardedAdam& adam,
                                   dist::Communicator& tensor_group);
double clip_gradient_blocks(const models::Transformer& model, const optim::ShardedAdam& adam,
                            dist::Communicator& tensor_group, dist::Communicator& data_group, double clip);

}  // namespace tessera::train
