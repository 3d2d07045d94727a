// Run under mpirun -np 4 with test_distributed.cpp: ZeRO-1 (optim::ShardedAdam over a
// reduce-scattering GradientReducer) against whole Adam over all-reduced gradients, float64, over
// several clipped steps, at dp=2 (two independent pairs), dp=4 and tp=2 x dp=2.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "autograd/ops.h"
#include "data/batching.h"
#include "data/synthetic.h"
#include "data/vocab.h"
#include "dist/gradient_reducer.h"
#include "dist/mpi_communicator.h"
#include "dist/sharding.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "optim/sharded_adam.h"
#include "tiny_model.h"
#include "train/parallel_step.h"

namespace tessera {
namespace {

dist::MpiCommunicator& world() {
  static std::unique_ptr<dist::MpiCommunicator> w = dist::MpiCommunicator::world();
  return *w;
}

// In place, equal blocks: rank r's block gets every rank's block r summed (or averaged); the
// all-gather brings every rank's block to every rank.
TEST(ZeroCollectives, InPlaceReduceScatterAndAllGather) {
  const int r = world().rank(), n = world().size();
  for (const dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::average}) {
    std::vector<double> v(static_cast<std::size_t>(2 * n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 10.0 * r + static_cast<double>(i);
    Tensor t = Tensor::from(v, {2 * n});
    world().reduce_scatter_async(t, op)->wait();
    const double ranks_sum = 10.0 * n * (n - 1) / 2, by = op == dist::ReduceOp::average ? n : 1;
    for (int i = 2 * r; i < 2 * r + 2; ++i)
      EXPECT_DOUBLE_EQ(t.to_doubles()[static_cast<std::size_t>(i)], (ranks_sum + n * i) / by) << i;
  }
  std::vector<double> mine(static_cast<std::size_t>(2 * n), -1.0), all;
  for (int k = 0; k < n; ++k) all.insert(all.end(), {static_cast<double>(k), k + 0.5});
  mine[static_cast<std::size_t>(2 * r)] = r;
  mine[static_cast<std::size_t>(2 * r + 1)] = r + 0.5;
  Tensor g = Tensor::from(mine, {2 * n});
  std::unique_ptr<dist::Request> request = world().all_gather_async(g);
  request->wait();
  EXPECT_EQ(g.to_doubles(), all);
  Tensor odd = Tensor::zeros({2 * n + 1}, DType::f64);
  EXPECT_THROW(world().reduce_scatter_async(odd, dist::ReduceOp::sum), Error);
  EXPECT_THROW(world().all_gather_async(odd), Error);
}

// This data-parallel rank's share of sentences [first, first + n): loss / global tokens, backward.
double forward_backward(const models::Transformer& model, const data::ExampleSet& examples, std::int64_t first,
                        std::int64_t n, dist::Communicator& data_group) {
  std::vector<std::int64_t> all;
  for (std::int64_t i = first; i < first + n; ++i) all.push_back(i);
  const std::int64_t tokens = data::make_batch(examples, all).tgt_tokens;
  const std::vector<std::int64_t> rows = dist::even_split(n, data_group.size());
  std::int64_t start = 0;
  for (int k = 0; k < data_group.rank(); ++k) start += rows[static_cast<std::size_t>(k)];
  const std::vector<std::int64_t> mine(all.begin() + start,
                                       all.begin() + start + rows[static_cast<std::size_t>(data_group.rank())]);
  const data::Batch b = data::make_batch(examples, mine);
  models::DropoutStream no_dropout;
  const std::int64_t cells = b.tgt_out.numel();
  ag::Var logits = ag::reshape(model.forward(b.src, b.src_padding, b.tgt_in, no_dropout), {cells, 24});
  ag::Var loss = ag::cross_entropy(logits, b.tgt_out.reshape({cells}), 0.1, data::kPadId);
  ag::scale(loss, 1.0 / static_cast<double>(tokens)).backward();
  Tensor sum = Tensor::full({1}, loss.value().item() / static_cast<double>(tokens), DType::f64);
  data_group.all_reduce(sum, dist::ReduceOp::sum);
  return sum.to_doubles()[0];
}

// The largest difference of two lists of tensors, relative to the largest entry of `expect`.
double relative_difference(const std::vector<Tensor>& got, const std::vector<Tensor>& expect) {
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), expect[i].shape()) << i;
    const std::vector<double> a = got[i].to_doubles(), e = expect[i].to_doubles();
    for (std::size_t k = 0; k < a.size(); ++k) {
      scale = std::max(scale, std::abs(e[k]));
      err = std::max(err, std::abs(a[k] - e[k]));
    }
  }
  return err / scale;
}

std::vector<Tensor> values(const models::Transformer& model) {
  std::vector<Tensor> out;
  for (const ag::Var& p : model.parameters()) out.push_back(p.value());
  return out;
}

// `groups` independent jobs of world().size() / groups ranks, each tp x dp.
void expect_sharded_equals_whole(int tp, int groups) {
  const int r = world().rank(), job_size = world().size() / groups, dp = job_size / tp;
  auto job = world().split(r / job_size, r);
  auto tensor_group = job->split(job->rank() / tp, job->rank());
  auto data_group = job->split(job->rank() % tp, job->rank());
  ASSERT_EQ(data_group->size(), dp);
  const auto examples = data::make_synthetic(data::SyntheticTask::reverse, 60, 3, 9, 20, 5);
  const models::TransformerConfig config = tiny_config();
  const models::Transformer whole_model(config, 3, tensor_group.get()), sharded_model(config, 3, tensor_group.get());
  const optim::AdamOptions opt{.lr = 0.0, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9};
  dist::GradientReducer all_reduce(whole_model.parameters(), *data_group, 2048);  // several buckets
  dist::GradientReducer scatter(sharded_model.parameters(), *data_group, 2048, dist::ReduceMode::reduce_scatter);
  optim::Adam whole(whole_model.parameters(), opt);
  optim::ShardedAdam sharded(sharded_model.parameters(), scatter, opt);
  // 1/dp of the moments, but for a padding element per bucket and moment.
  EXPECT_LE(static_cast<double>(sharded.state_bytes()), static_cast<double>(2 * 8 * whole_model.num_parameters()) / dp +
                                                            static_cast<double>(2 * 8 * scatter.buckets()));
  for (int step = 0; step < 5; ++step) {
    all_reduce.arm();
    scatter.arm();
    const double loss_whole = forward_backward(whole_model, examples, 10 * step, 10, *data_group);
    const double loss_sharded = forward_backward(sharded_model, examples, 10 * step, 10, *data_group);
    EXPECT_NEAR(loss_sharded, loss_whole, 1e-10 * loss_whole) << "step " << step;
    all_reduce.finish();
    scatter.finish();
    train::synchronize_replicated_gradients(whole_model, *tensor_group);
    train::synchronize_replicated_blocks(sharded_model, sharded, *tensor_group);
    const double clip = 0.3;  // below the norms: every step clips
    const double norm_whole = train::clip_gradients(whole_model, *tensor_group, clip);
    const double norm_sharded = train::clip_gradient_blocks(sharded_model, sharded, *tensor_group, *data_group, clip);
    EXPECT_GT(norm_whole, clip);
    EXPECT_NEAR(norm_sharded, norm_whole, 1e-10 * norm_whole) << "step " << step;
    whole.step(1e-2);
    sharded.step(1e-2);
    EXPECT_LE(relative_difference(values(sharded_model), values(whole_model)), 1e-10) << "step " << step;
  }
  // Checkpoints: the gathered moments are whole Adam's, and scatter back into the same blocks.
  const optim::ShardedAdam::Moments gathered = sharded.gather_moments(true);
  EXPECT_LE(relative_difference(gathered.first, whole.first_moments()), 1e-10);
  EXPECT_LE(relative_difference(gathered.second, whole.second_moments()), 1e-10);
  optim::ShardedAdam restored(sharded_model.parameters(), scatter, opt);
  restored.set_state(sharded.steps(), whole.first_moments(), whole.second_moments());
  const optim::ShardedAdam::Moments again = restored.gather_moments(data_group->rank() == 0);
  if (data_group->rank() == 0) {
    EXPECT_LE(relative_difference(again.first, whole.first_moments()), 1e-10);
  }
  EXPECT_EQ(restored.steps(), 5);
}

TEST(ZeroOptimizer, DataParallelTwoEqualsWholeAdam) { expect_sharded_equals_whole(1, 2); }
TEST(ZeroOptimizer, DataParallelFourEqualsWholeAdam) { expect_sharded_equals_whole(1, 1); }
TEST(ZeroOptimizer, TensorParallelTwoTimesDataTwoEqualsWholeAdam) { expect_sharded_equals_whole(2, 1); }

}  // namespace
}  // namespace tessera
