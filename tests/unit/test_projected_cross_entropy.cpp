// The fused output projection + cross entropy (autograd/projected_cross_entropy.h): float64
// gradient checks, and the same losses and gradients as matmul + cross_entropy for any block size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "autograd/projected_cross_entropy.h"
#include "gradcheck.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/dispatch.h"
#include "models/transformer.h"

namespace tessera {
namespace {

using testing::expect_gradients_match;
using testing::random_double;
using Vars = std::vector<ag::Var>;

Tensor random_targets(std::int64_t n, std::int32_t vocab, std::int32_t pad, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& id : t) id = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
  t[1] = pad;  // at least one ignored row
  return Tensor::from(t, {n});
}

TEST(GradCheck, ProjectedCrossEntropyOverBlocksWithIgnoredRows) {
  const std::int32_t pad = 0;
  const Tensor targets = random_targets(5, 7, pad, 1);
  for (double smoothing : {0.0, 0.1}) {
    for (std::int64_t block : {2, 5}) {  // blocks of 2, 2 and 1 rows; one block
      SCOPED_TRACE("smoothing " + std::to_string(smoothing) + ", block " + std::to_string(block));
      const auto f = [&](const Vars& v) {
        return ag::projected_cross_entropy(v[0], v[1], targets, smoothing, pad, nullptr, block);
      };
      const std::vector<Tensor> in = {random_double({5, 4}, 2, -2, 2), random_double({7, 4}, 3, -2, 2)};
      expect_gradients_match(f, in);
      expect_gradients_match(f, in, 1e-6, 1e-6, {0});  // w alone needs a gradient
      expect_gradients_match(f, in, 1e-6, 1e-6, {1});  // h alone
    }
  }
}

// Relative max-norm difference of two tensors.
double max_rel_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_doubles(), y = b.to_doubles();
  double err = 0, scale = 1e-30;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / scale;
}

TEST(ProjectedCrossEntropy, MatchesTheUnfusedOpForEveryBlockSize) {
  const std::int64_t n = 37, d = 16, vocab = 50;
  const std::int32_t pad = 3;
  const Tensor targets = random_targets(n, vocab, pad, 4);
  const Tensor h0 = random_double({n, d}, 5, -2, 2).to(DType::f32), w0 = random_double({vocab, d}, 6).to(DType::f32);
  ag::Var h = ag::Var::parameter(h0.clone(), "h"), w = ag::Var::parameter(w0.clone(), "w");
  double nll = 0;
  ag::Var loss = ag::cross_entropy(ag::matmul(h, w, false, true), targets, 0.1, pad, &nll);
  ag::scale(loss, 0.25).backward();
  for (std::int64_t block : {1, 8, 37, 100}) {
    SCOPED_TRACE("block " + std::to_string(block));
    ag::Var hb = ag::Var::parameter(h0.clone(), "h"), wb = ag::Var::parameter(w0.clone(), "w");
    double nll_b = 0;
    ag::Var loss_b = ag::projected_cross_entropy(hb, wb, targets, 0.1, pad, &nll_b, block);
    EXPECT_NEAR(loss_b.value().item(), loss.value().item(), 1e-6 * std::abs(loss.value().item()));
    EXPECT_NEAR(nll_b, nll, 1e-6 * nll);
    // Several blocks share w packed once (the packed kernel's sums): released on return.
    EXPECT_EQ(cpu::find_packed_weight(wb.value().data<float>(), vocab, d, d), nullptr);
    ag::scale(loss_b, 0.25).backward();
    EXPECT_LE(max_rel_diff(hb.grad(), h.grad()), 1e-5);
    EXPECT_LE(max_rel_diff(wb.grad(), w.grad()), 1e-5);
    ag::NoGradGuard no_grad;  // the loss alone (validation): the same value
    EXPECT_EQ(ag::projected_cross_entropy(hb, wb, targets, 0.1, pad, nullptr, block).value().item(),
              loss_b.value().item());
  }
}

TEST(ProjectedCrossEntropy, NoRowsGiveZeroLossAndGradients) {
  ag::Var h = ag::Var::parameter(Tensor::empty({0, 3}), "h"), w = ag::Var::parameter(Tensor::full({5, 3}, 1.0), "w");
  ag::Var loss = ag::projected_cross_entropy(h, w, Tensor::empty({0}, DType::i32), 0.1, 0);
  EXPECT_EQ(loss.value().item(), 0.0);
  loss.backward();
  for (double g : w.grad().to_doubles()) EXPECT_EQ(g, 0.0);
}

TEST(ProjectedCrossEntropy, NamesMismatchedShapes) {
  const Tensor targets = random_targets(4, 6, 0, 7);
  const ag::Var h(random_double({4, 3}, 8)), w(random_double({6, 5}, 9));
  EXPECT_THROW(ag::projected_cross_entropy(h, w, targets, 0.0, 0), std::exception);
  EXPECT_THROW(ag::projected_cross_entropy(h, ag::Var(random_double({6, 3}, 9)), targets.narrow_rows(0, 3), 0.0, 0),
               std::exception);
}

// The training path's loss (forward_loss, fused on one CPU process) against forward() +
// cross_entropy(): the same loss, gradients equal to float32 rounding.
TEST(ProjectedCrossEntropy, TransformerForwardLossMatchesLogitsPath) {
  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 29;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_model = 16;
  c.d_ff = 32;
  c.heads = 2;
  c.dropout = 0.0;
  const Tensor src = Tensor::from(std::vector<std::int32_t>{5, 6, 7, 2, 8, 9, 2, 0}, {2, 4});
  const Tensor src_pad = Tensor::from(std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 1}, {2, 4});
  const Tensor tgt_in = Tensor::from(std::vector<std::int32_t>{1, 10, 11, 1, 12, 0}, {2, 3});
  const Tensor targets = Tensor::from(std::vector<std::int32_t>{10, 11, 2, 12, 2, 0}, {6});
  std::vector<std::vector<double>> grads[2];
  double losses[2];
  for (int fused = 0; fused < 2; ++fused) {
    models::Transformer m(c, 3);
    models::DropoutStream drop;
    double nll = 0;
    ag::Var loss =
        fused ? m.forward_loss(src, src_pad, tgt_in, targets, 0.1, 0, &nll, drop)
              : m.cross_entropy(ag::reshape(m.forward(src, src_pad, tgt_in, drop), {6, 29}), targets, 0.1, 0, &nll);
    losses[fused] = loss.value().item();
    loss.backward();
    for (const ag::Var& p : m.parameters()) grads[fused].push_back(p.grad().to_doubles());
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-6 * losses[0]);
  for (std::size_t i = 0; i < grads[0].size(); ++i)
    for (std::size_t j = 0; j < grads[0][i].size(); ++j) EXPECT_NEAR(grads[1][i][j], grads[0][i][j], 1e-5) << i;
}

}  // namespace
}  // namespace tessera
