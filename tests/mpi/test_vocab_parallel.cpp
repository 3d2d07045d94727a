// Run under mpirun -np 4 (CTest does): vocabulary parallelism (dist/vocab_parallel.h) against one
// process in float64, on vocabularies that do not divide over the ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autograd/ops.h"
#include "data/batching.h"
#include "data/synthetic.h"
#include "data/vocab.h"
#include "dist/mpi_communicator.h"
#include "dist/parallel_ops.h"
#include "dist/sharding.h"
#include "dist/vocab_parallel.h"
#include "models/transformer.h"

namespace tessera {
namespace {

dist::MpiCommunicator& world() {
  static std::unique_ptr<dist::MpiCommunicator> w = dist::MpiCommunicator::world();
  return *w;
}

Tensor uniform(const Shape& shape, std::uint64_t seed) {  // the same on every rank
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& e : v) e = u(rng);
  return Tensor::from_doubles(v, shape, DType::f64);
}

// max |a - b| <= tol * max(max |b|, floor): each tensor's scale, with a floor for gradients that
// are zero in exact arithmetic (the key projection's bias: softmax ignores a constant added to
// every score; rounding leaves ~1e-17 of it there).
void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what, double floor = 0) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double scale = 0, err = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    scale = std::max(scale, std::abs(y[k]));
    err = std::max(err, std::abs(x[k] - y[k]));
  }
  EXPECT_LE(err, tol * std::max(scale, floor)) << what << " on rank " << world().rank();
}

// A tied table of 11 ids over the 4 ranks (blocks of 3, 3, 3, 2): embedding rows through tanh into
// the logits of the same table, then the label-smoothed cross entropy (one ignored row, one id of
// each rank's block). Every gradient matches central differences, each computed by all ranks.
TEST(VocabParallel, EmbeddingAndCrossEntropyGradientsMatchCentralDifferences) {
  dist::Communicator& group = world();
  const std::int64_t vocab = 11, d = 3;
  const dist::VocabBlock block = dist::vocab_block(vocab, group);
  ag::Var table = ag::Var::parameter(
      dist::take_block(uniform({vocab, d}, 1), dist::ShardDim::rows, group.rank(), group.size()), "table");
  ag::Var mix = ag::Var::parameter(uniform({d, d}, 2), "mix");  // replicated
  const Tensor ids = Tensor::from(std::vector<std::int32_t>{0, 4, 10, 7, 3, 9}, {6});
  const Tensor targets = Tensor::from(std::vector<std::int32_t>{10, 1, 0, 5, 8, 6}, {6});  // 0: ignored
  const auto loss = [&] {
    const ag::Var h = ag::tanh(ag::matmul(dist::vocab_parallel_embedding(table, ids, block, group), mix));
    const ag::Var logits = ag::matmul(dist::copy_to_tensor_parallel(h, group), table, false, true);
    return dist::vocab_parallel_cross_entropy(logits, targets, 0.2, 0, block, group);
  };
  loss().backward();
  constexpr double h = 1e-6;
  const auto central = [&](double& entry, bool mine) {
    ag::NoGradGuard no_grad;
    const double saved = entry;
    if (mine) entry = saved + h;
    const double up = loss().value().item();
    if (mine) entry = saved - h;
    const double down = loss().value().item();
    entry = saved;
    return (up - down) / (2 * h);
  };
  const std::vector<double> dmix = mix.grad().to_doubles();
  for (std::int64_t j = 0; j < mix.value().numel(); ++j)
    EXPECT_NEAR(dmix[static_cast<std::size_t>(j)], central(mix.value().data<double>()[j], true), 1e-8) << "mix " << j;
  const std::vector<double> analytic = table.grad().to_doubles();
  for (int owner = 0; owner < group.size(); ++owner) {
    const std::int64_t entries = dist::block_range(vocab, owner, group.size()).count * d;  // the same on every rank
    for (std::int64_t j = 0; j < entries; ++j) {
      const double numeric =
          central(table.value().data<double>()[owner == group.rank() ? j : 0], owner == group.rank());
      if (owner == group.rank()) {
        EXPECT_NEAR(analytic[static_cast<std::size_t>(j)], numeric, 1e-8) << "table rank " << owner << " " << j;
      }
    }
  }
}

models::TransformerConfig tiny_config(bool shared) {
  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 25;  // 13 + 12 at tp=2, 7 + 6 + 6 + 6 at tp=4
  if (!shared) c.src_vocab = 27;
  c.share_embeddings = c.tie_output = shared;
  c.encoder_layers = c.decoder_layers = 2;
  c.d_model = 16;
  c.d_ff = 32;
  c.heads = 4;
  c.dropout = 0.0;
  c.dtype = DType::f64;
  c.vocab_parallel = true;
  return c;
}

struct LossSums {
  double smoothed = 0, nll = 0;
};

LossSums loss_and_grads(const models::Transformer& model, const data::Batch& b) {
  models::DropoutStream no_dropout;
  const std::int64_t rows = b.tgt_out.numel();
  const ag::Var logits =
      ag::reshape(model.forward(b.src, b.src_padding, b.tgt_in, no_dropout), {rows, model.output_block().count});
  LossSums s;
  ag::Var loss = model.cross_entropy(logits, b.tgt_out.reshape({rows}), 0.1, data::kPadId, &s.nll);
  s.smoothed = loss.value().item();
  loss.backward();
  return s;
}

// Vocabulary-parallel tp (groups of tp adjacent ranks, each the same batch) against one process:
// the loss, the NLL, each parameter's block of the gradient and a decoding step's log-probabilities.
void expect_vocab_parallel_equals_single(int tp, bool shared) {
  auto group = world().split(world().rank() / tp, world().rank());
  const models::TransformerConfig config = tiny_config(shared);
  const auto examples = data::make_synthetic(data::SyntheticTask::reverse, 6, 3, 9, 20, 5);
  const data::Batch b = data::make_batch(examples, {0, 1, 2, 3, 4, 5});
  const models::Transformer single(config, 3), model(config, 3, group.get());
  ASSERT_EQ(model.output_block().count, dist::block_range(25, group->rank(), tp).count);
  const LossSums ref = loss_and_grads(single, b), got = loss_and_grads(model, b);
  EXPECT_NEAR(got.smoothed, ref.smoothed, 1e-10 * ref.smoothed);
  EXPECT_NEAR(got.nll, ref.nll, 1e-10 * ref.nll);
  double model_scale = 0;
  for (const ag::Var& p : single.parameters())
    for (double g : p.grad().to_doubles()) model_scale = std::max(model_scale, std::abs(g));
  const auto& params = model.parameters();
  ASSERT_EQ(params.size(), single.parameters().size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor expect =
        dist::take_block(single.parameter(params[i].name()).grad(), model.shard_dim(i), group->rank(), tp);
    expect_close(params[i].grad(), expect, 1e-10, params[i].name(), 1e-4 * model_scale);
  }
  EXPECT_EQ(model.whole_num_parameters(), single.num_parameters());
  // Decoding: the gathered log-probabilities of the whole vocabulary.
  ag::NoGradGuard no_grad;
  models::DropoutStream no_dropout;
  const Tensor memory = single.encode(b.src, b.src_padding, no_dropout).value();
  models::DecoderCache a = single.start_decoding(memory, b.src_padding),
                       c = model.start_decoding(memory, b.src_padding);
  const std::vector<std::int32_t> bos(6, data::kBosId), next{5, 6, 7, 8, 9, 10};
  for (const auto& tokens : {bos, next})
    expect_close(model.decode_step(c, tokens), single.decode_step(a, tokens), 1e-10, "decode_step");
}

TEST(VocabParallel, TwoRanksEqualOneProcess) { expect_vocab_parallel_equals_single(2, true); }
TEST(VocabParallel, FourRanksEqualOneProcess) { expect_vocab_parallel_equals_single(4, true); }
TEST(VocabParallel, SeparateEmbeddingsAndOutputLayerEqualOneProcess) { expect_vocab_parallel_equals_single(4, false); }

}  // namespace
}  // namespace tessera
