// Activation recomputation: ag::checkpoint against the same function called directly, and the
// Transformer with train.recompute: layer against none (the float64 gradient check of
// ag::checkpoint is in test_gradcheck.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

#include "autograd/checkpoint.h"
#include "autograd/ops.h"
#include "models/transformer.h"
#include "test_util.h"

namespace tessera {
namespace {

using Vars = std::vector<ag::Var>;

Tensor random_float(const Shape& shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& e : v) e = normal(rng);
  return Tensor::from(v, shape);
}

// Bit for bit, not within a tolerance: recomputation must not even change the rounding.
void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what << " differs";
}

// A block that reads `memory` twice (as a decoder layer's cross-attention reads the encoder
// output for its keys and its values) and its parameters w1, w2.
ag::Var block(const Vars& in) {  // x, memory, w1, w2
  const ag::Var keys = ag::matmul(in[1], in[2]), values = ag::matmul(in[1], in[3]);
  return ag::add(ag::tanh(ag::mul(in[0], keys)), ag::dropout(values, 0.2, 5, 11));
}

// Two blocks on one memory, over two batches (gradients accumulate in the leaves): with the
// blocks checkpointed or not.
std::vector<Tensor> two_blocks_gradients(bool checkpointed, std::weak_ptr<ag::Node>* inside = nullptr) {
  const ag::Var source = ag::Var::parameter(random_float({8, 16}, 1), "source");
  const ag::Var w1 = ag::Var::parameter(random_float({16, 16}, 2), "w1");
  const ag::Var w2 = ag::Var::parameter(random_float({16, 16}, 3), "w2");
  for (int batch = 0; batch < 2; ++batch) {
    const ag::Var memory = ag::tanh(source);  // an op, like the encoder output: its gradient sums 4 parts
    const auto run = [&](const Vars& in) {
      const ag::Var y = block(in);
      if (inside != nullptr) *inside = y.node();
      return y;
    };
    ag::Var x = ag::Var(random_float({8, 16}, 4 + batch));
    for (int layer = 0; layer < 2; ++layer)
      x = checkpointed ? ag::checkpoint(run, {x, memory, w1, w2}) : run({x, memory, w1, w2});
    if (inside != nullptr && checkpointed) {
      EXPECT_TRUE(inside->expired()) << "the checkpoint kept its graph";
    }
    ag::sum(ag::mul(x, ag::Var(random_float({8, 16}, 9)))).backward();
  }
  return {source.grad(), w1.grad(), w2.grad()};
}

TEST(Checkpoint, SameGradientsBitForBitKeepingNoGraph) {
  std::weak_ptr<ag::Node> inside;
  const std::vector<Tensor> direct = two_blocks_gradients(false), recomputed = two_blocks_gradients(true, &inside);
  for (std::size_t i = 0; i < direct.size(); ++i)
    expect_same_bits(recomputed[i], direct[i], "gradient " + std::to_string(i));
}

// The data-parallel gradient buckets start a bucket's all-reduce from these hooks: each must run
// once per backward, when the gradient is final, also for a parameter used inside and outside.
TEST(Checkpoint, GradientReadyHooksRunOnceWithTheFinalGradient) {
  const ag::Var source = ag::Var::parameter(random_float({8, 16}, 1), "source");
  const ag::Var w1 = ag::Var::parameter(random_float({16, 16}, 2), "w1");
  const ag::Var w2 = ag::Var::parameter(random_float({16, 16}, 3), "w2");
  std::vector<std::pair<std::string, Tensor>> ready;  // name, gradient when its hook ran
  for (ag::Var p : {source, w1, w2})
    p.set_grad_ready_hook([&ready, p] { ready.emplace_back(p.name(), p.grad().clone()); });
  const ag::Var memory = ag::tanh(source);
  const ag::Var y = ag::checkpoint(block, {ag::Var(random_float({8, 16}, 4)), memory, w1, w2});
  ag::sum(ag::add(ag::checkpoint(block, {y, memory, w1, w2}), ag::matmul(y, w2))).backward();  // w2 outside too
  ASSERT_EQ(ready.size(), 3u);
  for (const auto& [name, grad] : ready) {
    const ag::Var& p = name == "source" ? source : name == "w1" ? w1 : w2;
    expect_same_bits(grad, p.grad(), name + " when its hook ran");
  }
  for (ag::Var p : {source, w1, w2}) p.set_grad_ready_hook(nullptr);
}

TEST(Checkpoint, RunsTheFunctionAgainOnlyWhenRecordingAGraph) {
  int calls = 0;
  const auto counted = [&calls](const Vars& in) {
    ++calls;
    return ag::scale(in[0], 2.0);
  };
  const ag::Var w = ag::Var::parameter(Tensor::ones({3}), "w");
  {
    ag::NoGradGuard no_grad;
    EXPECT_FALSE(ag::checkpoint(counted, {w}).requires_grad());
  }
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(ag::checkpoint(counted, {ag::Var(Tensor::ones({3}))}).requires_grad());  // nothing needs a gradient
  EXPECT_EQ(calls, 2);
  ag::Var y = ag::checkpoint(counted, {w});
  EXPECT_EQ(calls, 3);
  ag::sum(y).backward();
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(w.grad().to_doubles(), (std::vector<double>{2, 2, 2}));
}

// A parameter the function reads but the checkpoint does not list would get its hook from the
// recompute alone (before the rest of the graph added its part): refused.
TEST(Checkpoint, EveryParameterTheFunctionReadsMustBeAnInput) {
  const ag::Var w = ag::Var::parameter(Tensor::ones({3}), "hidden.weight");
  const ag::Var x = ag::Var::parameter(Tensor::ones({3}), "x");
  ag::Var y = ag::checkpoint([&w](const Vars& in) { return ag::mul(in[0], w); }, {x});
  EXPECT_EQ(testing::error_of([&] { ag::sum(y).backward(); }),
            "checkpoint: the function reads 'hidden.weight', which needs a gradient, but it is not among the "
            "checkpoint's inputs (list every parameter the function uses)");
}

// ---- the Transformer: recompute: layer against none

models::TransformerConfig small_config(bool pre_norm) {
  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 23;
  c.encoder_layers = c.decoder_layers = 2;
  c.d_model = 16;
  c.d_ff = 32;
  c.heads = 4;
  c.dropout = 0.3;
  c.pre_norm = pre_norm;
  return c;
}

Tensor ids(const Shape& shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& e : v) e = 4 + static_cast<std::int32_t>(rng() % 19);
  return Tensor::from(v, shape);
}

struct StepResult {
  std::vector<double> losses;
  std::vector<Tensor> grads;
  std::uint64_t dropout_offset = 0;
};

// Two batches of one update (dropout on, the training stream), their losses and the accumulated
// gradients.
StepResult train_step(const models::TransformerConfig& c) {
  const models::Transformer model(c, 5);
  models::DropoutStream drop = models::DropoutStream::for_step(9, 0, 4);
  StepResult r;
  for (std::uint32_t batch = 0; batch < 2; ++batch) {
    const Tensor src = ids({3, 7}, 10 + batch), tgt_in = ids({3, 6}, 20 + batch);
    const ag::Var logits = model.forward(src, Tensor::zeros({3, 7}, DType::i32), tgt_in, drop);
    ag::Var loss = ag::cross_entropy(ag::reshape(logits, {18, 23}), ids({18}, 30 + batch), 0.1, -100);
    r.losses.push_back(loss.value().item());
    loss.backward();
  }
  for (const ag::Var& p : model.parameters()) r.grads.push_back(p.grad());
  r.dropout_offset = drop.offset;
  return r;
}

TEST(RecomputeLayers, SameLossesAndGradientsBitForBitPreAndPostNorm) {
  for (const bool pre_norm : {false, true}) {
    SCOPED_TRACE(pre_norm ? "pre-norm" : "post-norm");
    models::TransformerConfig c = small_config(pre_norm);
    const StepResult none = train_step(c);
    c.recompute_layers = true;
    const StepResult layer = train_step(c);
    EXPECT_EQ(layer.losses, none.losses);
    EXPECT_EQ(layer.dropout_offset, none.dropout_offset);
    const std::vector<ag::Var> params = models::Transformer(c, 5).parameters();
    for (std::size_t i = 0; i < params.size(); ++i) expect_same_bits(layer.grads[i], none.grads[i], params[i].name());
    // Not vacuous: dropout is on (without it the losses differ).
    c.dropout = 0.0;
    EXPECT_NE(train_step(c).losses, none.losses);
  }
}

}  // namespace
}  // namespace tessera
