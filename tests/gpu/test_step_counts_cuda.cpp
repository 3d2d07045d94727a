// A bfloat16 GPU training step's work, counted (common/counters.h): the dtype casts it launches
// and its host<->device copies, per step, as train::Run takes a single-GPU step (run_batch, the
// clipped gradient norm, Adam). Printed for docs/gpu.md; the checks say what the kept bfloat16
// weights (docs/gpu.md, "bfloat16 weights once per step") save.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "common/counters.h"
#include "data/vocab.h"
#include "dist/local_communicator.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "train/parallel_step.h"
#include "train/run.h"

namespace tessera {
namespace {

using counters::Event;

models::TransformerConfig bf16_config() {
  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 37;
  c.encoder_layers = c.decoder_layers = 2;
  c.d_model = 64;
  c.d_ff = 128;
  c.heads = 2;  // head dimension 32
  c.dropout = 0.1;
  c.device = Device::cuda;
  c.bf16_compute = true;
  return c;
}

// A batch of `rows` sentences of random ids (no padding): bos + target in, target + eos out.
data::Batch random_batch(std::int64_t rows, std::int64_t len, std::uint32_t seed) {
  std::mt19937 rng(seed);
  data::Batch b;
  b.src = Tensor::zeros({rows, len}, DType::i32);
  b.src_padding = Tensor::zeros({rows, len}, DType::i32);
  b.tgt_in = Tensor::zeros({rows, len}, DType::i32);
  b.tgt_out = Tensor::zeros({rows, len}, DType::i32);
  for (std::int64_t k = 0; k < rows * len; ++k) {
    b.src.data<std::int32_t>()[k] = 4 + static_cast<std::int32_t>(rng() % 33u);
    b.tgt_out.data<std::int32_t>()[k] = k % len == len - 1 ? data::kEosId : 4 + static_cast<std::int32_t>(rng() % 33u);
    b.tgt_in.data<std::int32_t>()[k] = k % len == 0 ? data::kBosId : b.tgt_out.data<std::int32_t>()[k - 1];
  }
  b.tgt_tokens = rows * len;
  for (std::int64_t r = 0; r < rows; ++r) b.indices.push_back(r);
  return b;
}

struct StepCounts {
  std::int64_t casts = 0, to_host = 0, to_device = 0;
  std::vector<double> losses;
};

// `steps` training steps of `model` (the first not counted: it warms nothing up today, but a step
// that does must not hide in the average), as train::Run's single-GPU step takes them.
StepCounts count_steps(const models::Transformer& model, int steps) {
  optim::Adam adam(model.parameters(), {.lr = 1e-3});
  dist::LocalCommunicator one;
  const data::Batch batch = random_batch(4, 8, 7);
  StepCounts c;
  for (int step = 0; step < steps; ++step) {
    if (step == 1) counters::reset();
    models::DropoutStream drop = models::DropoutStream::for_step(5, 0, step + 1);
    const train::LossSums s = train::run_batch(model, batch, 0.1, drop, 1.0 / static_cast<double>(batch.tgt_tokens));
    train::clip_gradients(model, one, 1.0);
    adam.step(1e-3);
    c.losses.push_back(s.smoothed);
  }
  const int counted = steps - 1;
  c.casts = counters::read(Event::device_casts) / counted;
  c.to_host = counters::read(Event::device_to_host_copies) / counted;
  c.to_device = counters::read(Event::host_to_device_copies) / counted;
  std::printf("bf16 step counts: %lld device casts, %lld device-to-host and %lld host-to-device copies per step\n",
              static_cast<long long>(c.casts), static_cast<long long>(c.to_host), static_cast<long long>(c.to_device));
  return c;
}

// The parameters whose products use a kept bfloat16 copy (each once per forward).
std::int64_t kept_copies(const models::Transformer& model) {
  std::int64_t n = 0;
  for (const ag::Var& p : model.parameters()) n += p.compute_copy().defined() ? 1 : 0;
  return n;
}

// The kept copies give today's casts' values: the same losses bit for bit, one cast fewer per
// kept weight and step (the optimizer's fused pass writes them), and after the steps each copy
// is still its weight rounded to bfloat16.
TEST(CudaStepCounts, KeptBf16WeightsSaveOneCastPerWeightAndChangeNoLoss) {
  SKIP_WITHOUT_GPU();
  const models::Transformer kept(bf16_config(), 3), cast_per_call(bf16_config(), 3);
  for (const ag::Var& p : cast_per_call.parameters()) ag::Var(p).drop_compute_copy();
  const std::int64_t copies = kept_copies(kept);
  EXPECT_EQ(copies, 2 * (6 * 2 + 10 * 2) + 1) << "a linear's weight and bias, and the tied output projection";
  const StepCounts with = count_steps(kept, 4), without = count_steps(cast_per_call, 4);
  EXPECT_EQ(with.losses, without.losses);
  EXPECT_EQ(without.casts - with.casts, copies);
  // Per step up: each embedding's ids for its forward and its backward (range-checked on the
  // host), the targets, the padding mask once, Adam's tables in one copy. Down: the loss, the NLL
  // sum, the loss gradient's scale, the gradient norm.
  EXPECT_EQ(with.to_device, 2 * 2 + 1 + 1 + 1);
  EXPECT_EQ(with.to_host, 4);
  EXPECT_EQ(with.to_host, without.to_host);
  EXPECT_EQ(with.to_device, without.to_device);
  for (std::size_t i = 0; i < kept.parameters().size(); ++i) {
    const ag::Var& p = kept.parameters()[i];
    expect_close(p.value(), cast_per_call.parameters()[i].value().to(Device::cpu), 0.0, "weight " + p.name());
    if (p.compute_copy().defined())
      expect_close(p.compute_copy(), p.value().to(Device::cpu).to(DType::bf16), 0.0, "bfloat16 copy of " + p.name());
  }
}

// A loaded checkpoint's weights reach the copies (io::assign_weights re-casts them).
TEST(CudaStepCounts, LoadedWeightsRefreshTheBf16Copies) {
  SKIP_WITHOUT_GPU();
  const models::Transformer trained(bf16_config(), 3), fresh(bf16_config(), 4);
  count_steps(trained, 2);
  io::Checkpoint c;
  for (const ag::Var& p : trained.parameters()) c.model.emplace(p.name(), p.value().to(Device::cpu));
  std::vector<ag::Var> params = fresh.parameters();
  io::assign_weights(c, "trained.h5", params);
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].compute_copy().defined())
      expect_close(params[i].compute_copy(), trained.parameters()[i].compute_copy().to(Device::cpu), 0.0,
                   params[i].name());
}

}  // namespace
}  // namespace tessera
