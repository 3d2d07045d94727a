// The kernels' cost model (kernels/cost.h) on shapes whose bytes and FLOPs are known by hand.
#include <gtest/gtest.h>

#include "kernels/cost.h"

namespace tessera {
namespace {

namespace cost = kernels::cost;

TEST(KernelCost, GemmIsTwoMnkFlopsOverItsThreeMatrices) {
  const cost::Cost c = cost::matmul(128, 256, 64, 2);
  EXPECT_EQ(c.flops, 2.0 * 128 * 256 * 64);
  EXPECT_EQ(c.bytes, 2.0 * (128 * 64 + 64 * 256 + 128 * 256));
  EXPECT_DOUBLE_EQ(c.intensity(), c.flops / c.bytes);
  EXPECT_EQ(cost::matmul_batch_sum(3, 128, 256, 64, 2).flops, 3 * c.flops);
}

TEST(KernelCost, LayerNormMovesItsRowsOnceAndFloat32Statistics) {
  // 4096 rows of 1024 bfloat16: x in, y out; gamma, beta (1024 each), mean and rstd (4096 each) in float32.
  const cost::Cost fwd = cost::layer_norm_forward(4096, 1024, 2);
  EXPECT_EQ(fwd.bytes, 2.0 * 4096 * 1024 * 2 + 4.0 * (2 * 1024 + 2 * 4096));
  EXPECT_EQ(fwd.flops, 8.0 * 4096 * 1024);
  // Backward: dy and x in, dx out; gamma in, dgamma and dbeta out; mean and rstd in.
  EXPECT_EQ(cost::layer_norm_backward(4096, 1024, 4).bytes, 3.0 * 4096 * 1024 * 4 + 4.0 * (3 * 1024 + 2 * 4096));
}

TEST(KernelCost, AttentionFollowsFlashAttentionsConvention) {
  // The GPU benchmark's shape: 16k tokens of d_model 2048 at d 64 and length 1024.
  const cost::AttentionShape s{.batch = 16, .heads = 32, .lq = 1024, .lk = 1024, .d = 64, .causal = false};
  const cost::Cost fwd = cost::attention_forward(s, 2);
  EXPECT_EQ(fwd.flops, 4.0 * 16 * 1024 * 1024 * 32 * 64);
  EXPECT_EQ(fwd.bytes, 4.0 * 16 * 32 * 1024 * 64 * 2 + 16.0 * 32 * 1024 * 4);  // q, k, v, out; lse
  EXPECT_EQ(cost::attention_backward(s, 2).flops, 2.5 * fwd.flops);
  cost::AttentionShape causal = s;
  causal.causal = true;
  EXPECT_EQ(cost::attention_forward(causal, 2).flops, fwd.flops / 2);
  EXPECT_EQ(cost::attention_forward(causal, 2).bytes, fwd.bytes);
}

TEST(KernelCost, AdamMovesSevenFloatsAParameterAndTheBf16Copy) {
  EXPECT_EQ(cost::adam_update(1000, false).bytes, 28000.0);
  EXPECT_EQ(cost::adam_update(1000, true).bytes, 30000.0);
  EXPECT_EQ(cost::adam_update(1000, false).flops, 13000.0);
}

TEST(KernelCost, CrossEntropyWithGradIsBothPassesReadingTheLogitsOnce) {
  const cost::Cost fwd = cost::cross_entropy_forward(512, 32000, 2), bwd = cost::cross_entropy_backward(512, 32000, 2),
                   both = cost::cross_entropy_with_grad(512, 32000, 2);
  EXPECT_EQ(both.flops, fwd.flops + bwd.flops);
  EXPECT_EQ(both.bytes, 2.0 * 512 * 32000 * 2 + 4.0 * 4 * 512);  // logits in, dlogits out; targets, loss, lse, nll
  EXPECT_LT(both.bytes, fwd.bytes + bwd.bytes);
}

TEST(KernelCost, ElementwiseAndCopies) {
  EXPECT_EQ(cost::binary(100, 4).bytes, 1200.0);
  EXPECT_EQ(cost::binary(100, 4).flops, 100.0);
  EXPECT_EQ(cost::cast(100, 4, 2).bytes, 600.0);
  EXPECT_EQ(cost::cast(100, 4, 2).flops, 0.0);
  EXPECT_EQ(cost::permute(100, 2).bytes, 400.0);
  EXPECT_EQ(cost::embedding_forward(10, 8, 2).bytes, 10.0 * 8 * 4 + 10 * 8 * 2 + 10 * 4);
  EXPECT_EQ(cost::dropout_forward(100, 2).bytes, 400.0);
  EXPECT_EQ(cost::full(100, 4).intensity(), 0.0);
}

// A decoder step of 64 sentences x beam 4 over 8000 ids: the log-probabilities are read once, and
// what goes back to the host is 8 candidates of 16 bytes a sentence.
TEST(KernelCost, BeamTopKReadsTheLogProbabilitiesOnce) {
  const cost::Cost c = cost::beam_topk(256, 8000, 64, 8);
  EXPECT_EQ(c.bytes, 256.0 * 8000 * 4 + 256 * 8 + 64 * 4 + 64 * 8 * 16);
  EXPECT_EQ(c.flops, 256.0 * 8000);
}

}  // namespace
}  // namespace tessera
