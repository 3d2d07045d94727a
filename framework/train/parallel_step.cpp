#include "train/parallel_step.h"

#include <cmath>

#include "dist/sharding.h"
#include "kernels/dispatch.h"

namespace tessera::train {

data::Batch data_parallel_share(const data::Batch& b, const data::ExampleSet& set, dist::Communicator& replicas) {
  if (replicas.size() == 1) return b;
  const std::vector<std::int64_t> rows = dist::even_split(static_cast<std::int64_t>(b.indices.size()), replicas.size());
  std::int64_t start = 0;
  for (int r = 0; r < replicas.rank(); ++r) start += rows[static_cast<std::size_t>(r)];
  const auto n = rows[static_cast<std::size_t>(replicas.rank())];
  if (n == 0) return {};
  const std::vector<std::int64_t> idx(b.indices.begin() + start, b.indices.begin() + start + n);
  return data::make_batch(set, idx);
}

void synchronize_replicated_gradients(const models::Transformer& model, dist::Communicator& tensor_group) {
  if (tensor_group.size() == 1) return;
  const std::vector<ag::Var>& params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (model.shard_dim(i) != dist::ShardDim::replicated) continue;
    ag::Var p = params[i];
    Tensor g = p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.value().dtype(), p.value().device());
    tensor_group.broadcast(g, 0);
    p.set_grad(g);
  }
}

double clip_gradient_norm(const std::vector<Tensor>& replicated, const std::vector<Tensor>& sharded,
                          dist::Communicator& tensor_group, double clip, dist::Communicator* blocks) {
  Tensor sq =
      Tensor::from(std::vector<double>{kernels::sum_of_squares(replicated), kernels::sum_of_squares(sharded)}, {2});
  if (blocks != nullptr) blocks->all_reduce(sq, dist::ReduceOp::sum);
  tensor_group.all_reduce(sq, dist::ReduceOp::sum);
  const double norm = std::sqrt(sq.data<double>()[0] / tensor_group.size() + sq.data<double>()[1]);
  if (clip > 0 && norm > clip) {
    for (const std::vector<Tensor>* group : {&replicated, &sharded})
      for (Tensor g : *group) kernels::scale_inplace(g, clip / norm);
  }
  return norm;
}

double clip_gradients(const models::Transformer& model, dist::Communicator& tensor_group, double clip) {
  std::vector<Tensor> replicated, sharded;
  const std::vector<ag::Var>& params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    (model.shard_dim(i) == dist::ShardDim::replicated ? replicated : sharded).push_back(params[i].grad());
  }
  return clip_gradient_norm(replicated, sharded, tensor_group, clip);
}

void synchronize_replicated_blocks(const models::Transformer& model, const optim::ShardedAdam& adam,
                                   dist::Communicator& tensor_group) {
  if (tensor_group.size() == 1) return;
  for (const optim::ShardedAdam::Piece& piece : adam.pieces()) {
    if (model.shard_dim(piece.param) != dist::ShardDim::replicated) continue;
    Tensor g = adam.gradient(piece);
    tensor_group.broadcast(g, 0);
  }
}

double clip_gradient_blocks(const models::Transformer& model, const optim::ShardedAdam& adam,
                            dist::Communicator& tensor_group, dist::Communicator& data_group, double clip) {
  std::vector<Tensor> replicated, sharded;
  for (const optim::ShardedAdam::Piece& piece : adam.pieces())
    (model.shard_dim(piece.param) == dist::ShardDim::replicated ? replicated : sharded).push_back(adam.gradient(piece));
  return clip_gradient_norm(replicated, sharded, tensor_group, clip, &data_group);
}

}  // namespace tessera::train
