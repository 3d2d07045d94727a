// The memory and step-time model (plan/memory_model.h): hand-checked arithmetic on a model whose
// tensors are all whole allocator blocks, what each layout option changes, and the peak of one
// real training step against the prediction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "data/synthetic.h"
#include "io/run_config.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "plan/memory_model.h"
#include "plan/preflight.h"
#include "tensor/allocator.h"
#include "train/run.h"
#include "unit/test_util.h"

namespace tessera {
namespace {

// One layer each side, d 16, d_ff 32, 2 heads, 64 shared entries, 32 tokens a side: every tensor is
// a multiple of 64 bytes and at most 4 KiB or a power of two, so no block rounds up and the figures
// below are sums of elements x 4 bytes.
plan::ModelShape small_model() {
  return {.src_vocab = 64, .tgt_vocab = 64, .layers = 1, .d_model = 16, .d_ff = 32, .heads = 2};
}

TEST(Plan, HandCheckedSmallModel) {
  const plan::MemoryEstimate e = plan::estimate_memory(small_model(), {}, 32);
  // Embedding 64*16 = 1024; encoder: attention 4*(256+16) = 1088, two norms 64, FFN 16*32+32 + 32*16+16
  // = 1072 (2224); decoder: two attentions and three norms 2272 + FFN 1072 (3344).
  EXPECT_EQ(e.parameters, 1024 + 2224 + 3344);
  EXPECT_EQ(e.parameter_bytes, 6592 * 4);
  EXPECT_EQ(e.gradient_bytes, 6592 * 4);
  EXPECT_EQ(e.optimizer_bytes, 2 * 6592 * 4);
  EXPECT_EQ(e.bucket_bytes, 0);
  // Per [32, 16] tensor 512 elements. Self-attention: Q, K, V GEMMs (biases added in place) 3,
  // heads split 3, output and heads merged 2, the output projection 1 (9 x 512), log-sum-exp 32 x 2
  // heads: 4672. Residual: dropout, sum, norm (3 x 512) + mean and rstd (2 x 32): 1600. FFN: fc1
  // with bias and ReLU in place on [32, 32] (1024), fc2 (512): 1536. Encoder layer 4672 + 1536 +
  // 2 x 1600 = 9408; decoder layer 2 x 4672 + 1536 + 3 x 1600 = 15680 (cross-attention keeps as
  // many: K and V on the 32 source tokens). Embeddings: lookup, scale, positions, dropout, on each
  // side: 4096; the batch's int32 ids and masks, 4 x 32: 128 floats' bytes.
  EXPECT_EQ(e.activation_bytes_no_recompute, (128 + 4096 + 9408 + 15680) * 4);
  EXPECT_EQ(e.activation_bytes, e.activation_bytes_no_recompute);
  // Recompute: embeddings 4096, each layer's input and the encoder output 3 x 512, the larger
  // layer 15680, and three gradients of [32, max(d, d_ff)] while it runs backward 3 x 1024.
  EXPECT_EQ(e.activation_bytes_recompute, (128 + 4096 + 1536 + 15680 + 3072) * 4);
  // Logits and their gradient 2 x 32 x 64, the decoder output's gradient 512, the output layer's
  // gradient and the parameter's float32 copy of it 2 x 1024.
  EXPECT_EQ(e.logits_bytes, (4096 + 512 + 2048) * 4);
  // The positional table: 1024 positions x 16.
  EXPECT_EQ(e.table_bytes, 16384 * 4);
  // Backward's start: parameters, two moments, the table, activations, logits. Its end:
  // parameters, two moments, the table, gradients, an embedding's dense gradient (1024) and the
  // logits (2048): less.
  EXPECT_TRUE(e.peak_at_start);
  EXPECT_EQ(e.peak_bytes, (3 * 6592 + 16384 + 128 + 29184 + 6656) * 4);
  EXPECT_EQ(e.tokens_per_rank, 32);
}

TEST(Plan, BlocksRoundUpAsTheAllocatorDoes) {
  EXPECT_EQ(allocation_block_size(1), 64u);
  EXPECT_EQ(allocation_block_size(4096), 4096u);
  EXPECT_EQ(allocation_block_size(5000), 5120u);  // 4096 + one eighth steps of 512
  // Data parallelism over 4: 8 token slots a rank and one sentence (32) for the odd row, flat
  // buckets as large as the gradients, and zero's moments a quarter each: 1648 floats = 6592
  // bytes, rounded up to 6656.
  const plan::MemoryEstimate e = plan::estimate_memory(small_model(), {.tensor = 1, .data = 4, .zero = true}, 32);
  EXPECT_EQ(e.tokens_per_rank, 8 + 32);
  EXPECT_EQ(e.bucket_bytes, 6592 * 4);
  EXPECT_EQ(e.optimizer_bytes, 2 * 6656);
}

TEST(Plan, EachOptionShrinksWhatItSplits) {
  const plan::ModelShape m = plan::paper_model("base");
  // GPU layouts: on the CPU the loss takes the logits a block of rows at a time, whatever the layout.
  const plan::MemoryEstimate plain = plan::estimate_memory(m, {.gpu = true}, 8192);
  const plan::MemoryEstimate recompute = plan::estimate_memory(m, {.recompute = true, .gpu = true}, 8192);
  EXPECT_LT(recompute.activation_bytes, plain.activation_bytes / 4);
  EXPECT_LT(recompute.peak_bytes, plain.peak_bytes);
  const plan::MemoryEstimate tp = plan::estimate_memory(m, {.tensor = 2, .gpu = true}, 8192);
  const plan::MemoryEstimate vp = plan::estimate_memory(m, {.tensor = 2, .vocab_parallel = true, .gpu = true}, 8192);
  EXPECT_EQ(tp.logits_bytes, plain.logits_bytes);  // replicated output layer: whole logits on each rank
  EXPECT_NEAR(vp.logits_bytes, plain.logits_bytes / 2, plain.logits_bytes * 0.02);
  EXPECT_LT(vp.parameters, tp.parameters);
  const plan::MemoryEstimate bf16 = plan::estimate_memory(m, {.bf16 = true, .gpu = true}, 8192);
  EXPECT_NEAR(bf16.activation_bytes, plain.activation_bytes / 2, plain.activation_bytes * 0.1);
}

TEST(Plan, RingCollectivesAndFlops) {
  const plan::Hardware hw{.tflops = 100, .bandwidth_gbs = 100, .latency_us = 10};
  // 2(p-1)(alpha + n/(p beta)) = 6 (10 us + 2.5e8 / 1e11 s) and half of it for an all-gather.
  EXPECT_NEAR(plan::ring_all_reduce_seconds(1e9, 4, hw), 6 * (1e-5 + 2.5e-3), 1e-12);
  EXPECT_NEAR(plan::ring_all_gather_seconds(1e9, 4, hw), 3 * (1e-5 + 2.5e-3), 1e-12);
  EXPECT_EQ(plan::ring_all_reduce_seconds(1e9, 1, hw), 0);
  // 32 tokens, sentence length 32: encoder 32 (4*256 + 2*16*32 + 2*32*16) = 98304, decoder
  // 32 (6*256 + 1024 + 32*16 + 2*32*16) + 32*2*256 = 147456, output 32*16*64 = 32768; x 2 x 3.
  const plan::StepEstimate s = plan::estimate_step(small_model(), {}, 32, hw);
  EXPECT_EQ(s.flops, 6.0 * (98304 + 147456 + 32768));
  EXPECT_NEAR(s.compute_s, s.flops / 1e14, 1e-18);
  EXPECT_EQ(s.data_bytes, 0);
  const plan::StepEstimate dp = plan::estimate_step(small_model(), {.data = 2}, 32, hw);
  EXPECT_EQ(dp.flops, plan::estimate_step(small_model(), {}, 16 + 32, hw).flops);  // a half and one sentence
  EXPECT_EQ(dp.data_bytes, 6592 * 4);                                              // 2 (p-1)/p of the gradients
}

// One real step (forward, loss, backward, Adam) of a full batch: the allocator's peak within 15% of
// the prediction, and not above it (the model is an upper bound).
TEST(Plan, PredictedPeakOfOneTrainingStep) {
  const plan::ModelShape m{.src_vocab = 2000, .tgt_vocab = 2000, .layers = 2, .d_model = 64, .d_ff = 256, .heads = 4};
  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = m.src_vocab;
  c.encoder_layers = c.decoder_layers = m.layers;
  c.d_model = m.d_model;
  c.d_ff = m.d_ff;
  c.heads = m.heads;
  const std::int64_t rows = 16, len = 32;
  models::Transformer model(c, 1);
  optim::Adam adam(model.parameters(), {});
  data::Batch b;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows * len));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(data::kFirstSymbol + i % 1000);
  b.src = b.tgt_in = b.tgt_out = Tensor::from(ids, {rows, len});
  b.src_padding = Tensor::zeros({rows, len}, DType::i32);
  b.src_tokens = b.tgt_tokens = rows * len;
  reset_peak_host_memory();
  models::DropoutStream drop = models::DropoutStream::for_step(1, 0, 1);
  train::run_batch(model, b, 0.1, drop, 1.0 / static_cast<double>(b.tgt_tokens));
  adam.step(1e-4);
  const auto measured = static_cast<double>(host_memory_stats().peak_in_use);
  const double predicted = plan::estimate_memory(m, {}, rows * len).peak_bytes;
  EXPECT_LE(measured, predicted);
  EXPECT_GT(measured, 0.85 * predicted) << "measured " << measured << ", predicted " << predicted;
}

TEST(Plan, PreflightSuggestsSettingsThatFit) {
  io::RunConfig cfg = io::RunConfig::parse(
      "model: {layers: 6, d_model: 512, d_ff: 2048, heads: 8}\n"
      "data: {task: copy, synthetic_vocab: 36996}\n"
      "train: {batch_tokens: 25000}\n",
      "test");
  const plan::MemoryCheck over = plan::check_memory(cfg, {.bytes = 16.0 * (1 << 30), .source = "test"});
  ASSERT_EQ(over.verdict, plan::Verdict::over);
  EXPECT_NE(over.message.find("at batch_tokens 25000"), std::string::npos) << over.message;
  const std::size_t at = over.message.find("--set train.batch_tokens=");
  ASSERT_NE(at, std::string::npos) << over.message;
  // The suggested batch keeps the tokens per update and passes the check.
  const std::int64_t batch = std::atoll(over.message.c_str() + at + 25);
  const std::int64_t accumulate = std::atoll(over.message.c_str() + over.message.find("train.accumulate=") + 17);
  EXPECT_EQ(batch, 25000 / accumulate);
  cfg.train.batch_tokens = batch;
  cfg.train.accumulate = accumulate;
  EXPECT_EQ(plan::check_memory(cfg, {.bytes = 16.0 * (1 << 30), .source = "test"}).verdict, plan::Verdict::fits);
  // Between 90% and 100% of the budget: a warning.
  const double needed = plan::check_memory(cfg, {}).needed_bytes;
  EXPECT_EQ(plan::check_memory(cfg, {.bytes = needed / 0.95, .source = "test"}).verdict, plan::Verdict::near);
  EXPECT_EQ(plan::check_memory(cfg, {.bytes = needed / 0.85, .source = "test"}).verdict, plan::Verdict::fits);
}

}  // namespace
}  // namespace tessera
