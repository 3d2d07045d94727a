// The GPU training path against the CPU: every autograd op forward and backward through the
// dispatch layer, a Transformer training step (loss, every gradient, the Adam update) in float32
// and in bfloat16 mixed precision, incremental decoding with its caches, the layout kernels
// decoding uses, and a bf16 step's casts and host-device copies, counted. Float32 cases use
// gpu_test_util.h's 1e-4 rule (TF32 off); bfloat16 training is compared by relative norms
// (documented at each check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <utility>

#include "autograd/ops.h"
#include "common/counters.h"
#include "data/vocab.h"
#include "dist/local_communicator.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/layout.h"
#include "kernels/dispatch.h"
#include "models/decoding.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "train/parallel_step.h"
#include "train/run.h"

namespace tessera {
namespace {

using Leaves = std::vector<ag::Var>;

// ||gpu - cpu|| and ||cpu|| over all elements (float64 on the host).
std::pair<double, double> difference_and_norm(const Tensor& gpu, const Tensor& cpu_ref) {
  const std::vector<double> g = gpu.to(Device::cpu).to_doubles(), c = cpu_ref.to(Device::cpu).to_doubles();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    diff += (g[i] - c[i]) * (g[i] - c[i]);
    norm += c[i] * c[i];
  }
  return {std::sqrt(diff), std::sqrt(norm)};
}

// Runs `f` on CPU leaves and on GPU copies of them, then the backward of sum(y * w) for fixed
// random w (every output element matters); compares the outputs and every leaf's gradient.
void expect_op_matches(const std::string& what, const std::vector<Tensor>& inputs,
                       const std::function<ag::Var(const Leaves&)>& f, double tol = kF32Tol) {
  Leaves c, g;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    c.push_back(ag::Var::parameter(inputs[i].clone(), "in" + std::to_string(i)));
    g.push_back(ag::Var::parameter(inputs[i].to(Device::cuda), "in" + std::to_string(i)));
  }
  const ag::Var yc = f(c), yg = f(g);
  ASSERT_EQ(yg.value().device(), Device::cuda) << what;
  expect_close(yg.value(), yc.value(), tol, what + " forward");
  const Tensor w = random(yc.shape(), 99);
  ag::sum(ag::mul(yc, ag::Var(w.to(yc.value().dtype())))).backward();
  ag::sum(ag::mul(yg, ag::Var(w.to(yg.value().dtype()).to(Device::cuda)))).backward();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(c[i].grad().defined(), g[i].grad().defined()) << what << " input " << i;
    if (c[i].grad().defined())
      expect_close(g[i].grad(), c[i].grad(), tol, what + " gradient of input " + std::to_string(i));
  }
}

TEST(CudaAutograd, ElementwiseReductionsAndLayoutMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Tensor a = random({4, 5, 8}, 1), b = random({4, 5, 8}, 2, 0.5, 2.0);
  expect_op_matches("add bias", {a, random({8}, 3)}, [](const Leaves& x) { return ag::add(x[0], x[1]); });
  expect_op_matches("add table", {a, random({5, 8}, 4)}, [](const Leaves& x) { return ag::add(x[0], x[1]); });
  expect_op_matches("sub", {a, b}, [](const Leaves& x) { return ag::sub(x[0], x[1]); });
  expect_op_matches("mul", {a, b}, [](const Leaves& x) { return ag::mul(x[0], x[1]); });
  expect_op_matches("div", {a, b}, [](const Leaves& x) { return ag::div(x[0], x[1]); });
  expect_op_matches("relu", {a}, [](const Leaves& x) { return ag::relu(x[0]); });
  expect_op_matches("tanh", {a}, [](const Leaves& x) { return ag::tanh(x[0]); });
  expect_op_matches("exp", {a}, [](const Leaves& x) { return ag::exp(x[0]); });
  expect_op_matches("log", {b}, [](const Leaves& x) { return ag::log(x[0]); });
  expect_op_matches("scale", {a}, [](const Leaves& x) { return ag::scale(x[0], -1.5); });
  expect_op_matches("sum over dim 0", {a}, [](const Leaves& x) { return ag::sum(x[0], 0); });
  expect_op_matches("mean", {a}, [](const Leaves& x) { return ag::mean(x[0]); });
  expect_op_matches("softmax", {a}, [](const Leaves& x) { return ag::softmax(x[0]); });
  expect_op_matches("log_softmax", {a}, [](const Leaves& x) { return ag::log_softmax(x[0]); });
  expect_op_matches("permute", {random({2, 3, 4, 5}, 5)}, [](const Leaves& x) {
    return ag::permute(x[0], {0, 2, 1, 3});
  });
  expect_op_matches("reshape", {a}, [](const Leaves& x) { return ag::reshape(x[0], {20, 8}); });
  // float32 -> bfloat16 -> float32: one bfloat16 rounding each way. (Scaled in float32 first: the
  // CPU kernels take float32 and float64 only, so a bfloat16 scale threw on the CPU side.)
  expect_op_matches(
      "cast", {a}, [](const Leaves& x) { return ag::cast(ag::cast(ag::scale(x[0], 2.0), DType::bf16), DType::f32); },
      kBf16Tol);
}

TEST(CudaAutograd, MatmulEveryTransposeAndSharedWeightMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::string l = std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0");
      const Tensor a = random(ta ? Shape{3, 5, 6} : Shape{3, 6, 5}, 10),
                   b = random(tb ? Shape{3, 7, 5} : Shape{3, 5, 7}, 11);
      expect_op_matches(l, {a, b}, [=](const Leaves& x) { return ag::matmul(x[0], x[1], ta, tb); });
      const Tensor shared = random(tb ? Shape{7, 5} : Shape{5, 7}, 12);
      expect_op_matches(l + " shared b", {a, shared}, [=](const Leaves& x) { return ag::matmul(x[0], x[1], ta, tb); });
    }
  }
  expect_op_matches("linear", {random({4, 5, 8}, 13), random({6, 8}, 14), random({6}, 15)},
                    [](const Leaves& x) { return ag::linear(x[0], x[1], x[2]); });
}

TEST(CudaAutograd, TransformerKernelsMatchCpu) {
  SKIP_WITHOUT_GPU();
  expect_op_matches("layer_norm", {random({4, 5, 16}, 20), random({16}, 21), random({16}, 22)},
                    [](const Leaves& x) { return ag::layer_norm(x[0], x[1], x[2], 1e-5); });
  const Tensor ids = Tensor::from(std::vector<std::int32_t>{1, 4, 4, 0, 10, 3, 1, 1, 7, 2, 9, 4}, {3, 4});
  expect_op_matches("embedding", {random({11, 8}, 23)}, [&](const Leaves& x) { return ag::embedding(x[0], ids); });
  expect_op_matches("dropout", {random({6, 33}, 24)}, [](const Leaves& x) { return ag::dropout(x[0], 0.3, 7, 128); });
  const Tensor targets = Tensor::from(std::vector<std::int32_t>{5, 0, 8, 1, 0, 0, 4, 7, 2, 3, 6, 0}, {12});
  expect_op_matches("cross_entropy", {random({12, 9}, 25, -3.0, 3.0)},
                    [&](const Leaves& x) { return ag::cross_entropy(x[0], targets, 0.1, data::kPadId); });
  // Ragged key padding (the second row sees 3 of 7 keys), cross-attention lengths, and causal.
  std::vector<std::int32_t> pad(14, 0);
  for (int j = 3; j < 7; ++j) pad[static_cast<std::size_t>(7 + j)] = 1;
  const Tensor key_padding = Tensor::from(pad, {2, 7});
  expect_op_matches(
      "cross attention", {random({2, 2, 5, 32}, 26), random({2, 2, 7, 32}, 27), random({2, 2, 7, 32}, 28)},
      [&](const Leaves& x) { return ag::attention(x[0], x[1], x[2], key_padding, {.causal = false, .scale = 0.0}); });
  expect_op_matches(
      "causal attention", {random({2, 2, 6, 64}, 29), random({2, 2, 6, 64}, 30), random({2, 2, 6, 64}, 31)},
      [](const Leaves& x) { return ag::attention(x[0], x[1], x[2], Tensor(), {.causal = true, .scale = 0.0}); });
}

TEST(CudaLayout, ConcatIndexRowsAndBf16DropoutMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Tensor a = random({2, 3, 4, 8}, 40), b = random({2, 3, 1, 8}, 41);
  expect_close(kernels::concat({a.to(Device::cuda), b.to(Device::cuda)}, 2), cpu::concat({a, b}, 2), 0.0, "concat");
  expect_close(kernels::index_rows(a.to(Device::cuda), {1, 0, 0}), cpu::index_rows(a, {1, 0, 0}), 0.0, "index_rows");
  // bfloat16 dropout: the CPU twin's float32 result on the same inputs, rounded once.
  const Tensor x = as_input(random({5, 77}, 42), DType::bf16);
  expect_close(kernels::dropout_forward(to_gpu(x, DType::bf16), 0.2, 3, 64),
               cpu::dropout_forward(x, 0.2, 3, 64).to(DType::bf16).to(DType::f32), 0.0, "bf16 dropout");
}

// ---------------------------------------------------------------- the model
models::TransformerConfig small_config(Device device, bool bf16) {
  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 37;
  c.encoder_layers = c.decoder_layers = 2;
  c.d_model = 64;
  c.d_ff = 128;
  c.heads = 2;  // head dimension 32
  c.dropout = 0.1;
  c.device = device;
  c.bf16_compute = bf16;
  return c;
}

models::TransformerConfig inference_config(Device device) {
  models::TransformerConfig c = small_config(device, false);
  c.dropout = 0.0;
  return c;
}

// Random ids in [4, vocab) with ragged lengths: rows end in eos, then padding (pad = 1 there).
void ragged_ids(std::int64_t rows, std::int64_t len, std::uint32_t seed, Tensor& ids, Tensor& pad) {
  std::mt19937 rng(seed);
  ids = Tensor::zeros({rows, len}, DType::i32);
  pad = Tensor::zeros({rows, len}, DType::i32);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t n = 2 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(len - 2));
    for (std::int64_t j = 0; j < len; ++j) {
      std::int32_t id = data::kPadId;
      if (j < n) id = 4 + static_cast<std::int32_t>(rng() % 33u);
      if (j == n) id = data::kEosId;
      ids.data<std::int32_t>()[r * len + j] = id;
      pad.data<std::int32_t>()[r * len + j] = j > n;
    }
  }
}

// A key projection's bias adds one constant to every score of a query's row, which softmax
// ignores: its exact gradient is 0, and what both devices compute is rounding noise.
bool has_no_true_gradient(const std::string& name) {
  return name.size() >= 11 && name.compare(name.size() - 11, 11, "k_proj.bias") == 0;
}

// Adam's first step moves a weight by about lr * sign(g), whatever |g|: where a gradient is within
// the two devices' rounding difference of zero its sign may differ, and the weights then differ by
// 2 lr. The GPU's updated weights, with those elements (the gradients too close to call) replaced
// by the CPU's, so that the comparison covers every other element.
Tensor updated_where_signs_agree(const Tensor& gpu_weight, const Tensor& cpu_weight, const Tensor& gpu_grad,
                                 const Tensor& cpu_grad) {
  Tensor out = from_gpu(gpu_weight);
  const Tensor gg = from_gpu(gpu_grad), gc = cpu_grad.to(DType::f32), wc = cpu_weight.to(DType::f32);
  std::int64_t unclear = 0;
  for (std::int64_t k = 0; k < out.numel(); ++k) {
    const double diff = std::abs(static_cast<double>(gg.data<float>()[k]) - gc.data<float>()[k]);
    if (std::abs(static_cast<double>(gc.data<float>()[k])) < 10.0 * diff) {
      out.data<float>()[k] = wc.data<float>()[k];
      ++unclear;
    }
  }
  // The float32 kernels agree to ~1e-6: only gradients at rounding level are unclear, a few.
  EXPECT_LE(unclear, out.numel() / 10) << unclear << " of " << out.numel() << " gradient signs unclear";
  return out;
}

struct Step {
  double loss;
  std::vector<Tensor> grads;
};

// One training step's forward and backward (dropout on), as the trainer runs it.
Step train_step(const models::Transformer& m, const Tensor& src, const Tensor& src_pad, const Tensor& tgt_in,
                const Tensor& tgt_out) {
  models::DropoutStream drop{.seed = 5, .offset = 1ull << 32, .training = true};
  const std::int64_t rows = tgt_out.numel();
  ag::Var logits = ag::reshape(m.forward(src, src_pad, tgt_in, drop), {rows, m.config().tgt_vocab});
  ag::Var loss = ag::cross_entropy(logits, tgt_out.reshape({rows}), 0.1, data::kPadId);
  ag::scale(loss, 1.0 / 100.0).backward();
  Step s{loss.value().item(), {}};
  for (const ag::Var& p : m.parameters()) s.grads.push_back(p.grad());
  return s;
}

class CudaTransformer : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ragged_ids(6, 11, 1, src, src_pad);
    Tensor unused;
    ragged_ids(6, 9, 2, tgt_out, unused);
    // Teacher forcing: bos, then the target shifted right.
    tgt_in = Tensor::zeros(tgt_out.shape(), DType::i32);
    for (std::int64_t r = 0; r < 6; ++r) {
      tgt_in.data<std::int32_t>()[r * 9] = data::kBosId;
      for (std::int64_t j = 1; j < 9; ++j)
        tgt_in.data<std::int32_t>()[r * 9 + j] = tgt_out.data<std::int32_t>()[r * 9 + j - 1];
    }
  }
  Tensor src, src_pad, tgt_in, tgt_out;
};

TEST_F(CudaTransformer, Float32StepAndAdamUpdateMatchCpu) {
  const models::Transformer cpu_model(small_config(Device::cpu, false), 3),
      gpu_model(small_config(Device::cuda, false), 3);
  const Step c = train_step(cpu_model, src, src_pad, tgt_in, tgt_out);
  const Step g = train_step(gpu_model, src, src_pad, tgt_in, tgt_out);
  EXPECT_NEAR(g.loss, c.loss, kF32Tol * (1 + std::abs(c.loss)));
  for (std::size_t i = 0; i < c.grads.size(); ++i)
    expect_close(g.grads[i], c.grads[i], kF32Tol, "gradient of " + cpu_model.parameters()[i].name());
  // The GPU's fused Adam on the GPU's gradients, the CPU's Adam on the CPU's: the weights agree.
  optim::Adam cpu_adam(cpu_model.parameters(), {.lr = 1e-3}), gpu_adam(gpu_model.parameters(), {.lr = 1e-3});
  cpu_adam.step();
  gpu_adam.step();
  for (std::size_t i = 0; i < c.grads.size(); ++i) {
    const std::string& name = cpu_model.parameters()[i].name();
    if (has_no_true_gradient(name)) continue;  // Adam turns its rounding noise into +-lr steps
    expect_close(updated_where_signs_agree(gpu_model.parameters()[i].value(), cpu_model.parameters()[i].value(),
                                           g.grads[i], c.grads[i]),
                 cpu_model.parameters()[i].value(), kF32Tol, "updated " + name);
  }
}

TEST_F(CudaTransformer, Bf16MixedPrecisionStaysCloseToFloat32) {
  const models::Transformer cpu_model(small_config(Device::cpu, false), 3),
      gpu_model(small_config(Device::cuda, true), 3);
  for (const ag::Var& p : gpu_model.parameters())
    EXPECT_EQ(p.value().dtype(), DType::f32) << "master weight " << p.name();
  const Step c = train_step(cpu_model, src, src_pad, tgt_in, tgt_out);
  const Step g = train_step(gpu_model, src, src_pad, tgt_in, tgt_out);
  // bfloat16 has 8 mantissa bits: the loss within 1%, each gradient within 20% in norm. One
  // rounding is 0.4%, but a ReLU input within rounding of 0 can switch its unit on or off: where a
  // fraction f of them switches, the gradients below differ by about sqrt(f) (f = 0.4%: 6%), and
  // more through each layer below. Under the CUDA emulator (framework/cuda_emulator: the same
  // roundings as the GPU) the last layer's gradients differ by 0.5%, the first encoder layer's by
  // up to 11% (k_proj, fc1): the 10% first set here failed there before any GPU ran it.
  EXPECT_NEAR(g.loss, c.loss, 1e-2 * std::abs(c.loss));
  // Relative to each gradient's norm, with a floor at 1% of the largest one: a gradient tiny next
  // to the others carries bfloat16's rounding of the larger quantities it is computed from.
  double largest = 0;
  for (std::size_t i = 0; i < c.grads.size(); ++i)
    largest = std::max(largest, difference_and_norm(c.grads[i], c.grads[i]).second);
  for (std::size_t i = 0; i < c.grads.size(); ++i) {
    const std::string& name = cpu_model.parameters()[i].name();
    EXPECT_EQ(g.grads[i].dtype(), DType::f32) << name;
    if (has_no_true_gradient(name)) continue;  // both sides are rounding noise
    const auto [diff, norm] = difference_and_norm(g.grads[i], c.grads[i]);
    EXPECT_LE(diff, 0.2 * std::max(norm, 0.01 * largest)) << "gradient of " << name << ": norm " << norm;
  }
}

TEST_F(CudaTransformer, IncrementalDecodingMatchesCpu) {
  const models::Transformer cpu_model(inference_config(Device::cpu), 4), gpu_model(inference_config(Device::cuda), 4);
  models::DropoutStream none;
  ag::NoGradGuard no_grad;
  models::DecoderCache cc = cpu_model.start_decoding(cpu_model.encode(src, src_pad, none).value(), src_pad);
  models::DecoderCache gc = gpu_model.start_decoding(gpu_model.encode(src, src_pad, none).value(), src_pad);
  std::vector<std::int32_t> tokens(6, data::kBosId);
  // Beam search's choice after each step, as if the six rows were two sentences of three beams
  // (one of them dead), each keeping six candidates.
  const kernels::BeamTopKOptions topk{
      .beam = 3, .count = 6, .eos = data::kEosId, .never_output = {data::kPadId, data::kBosId}};
  const Tensor beam_scores =
      Tensor::from(std::vector<double>{0.0, -1.0, -2.5, -0.5, -std::numeric_limits<double>::infinity(), -1.5}, {6});
  const Tensor eos_only = Tensor::from(std::vector<std::int32_t>{0, 0}, {2});
  for (int step = 0; step < 4; ++step) {
    const Tensor lc = cpu_model.decode_step(cc, tokens);
    // One small copy to the host a step: each sentence's six (score, index) pairs, not the
    // log-probabilities of the vocabulary (the cache is written in place on the GPU).
    counters::reset();
    const Tensor lg = gpu_model.decode_step_on_device(gc, tokens);
    const Tensor picks = kernels::beam_topk(lg, beam_scores, eos_only, topk).to(Device::cpu);
    EXPECT_EQ(counters::read(counters::Event::device_to_host_copies), 1) << "step " << step;
    EXPECT_EQ(counters::read(counters::Event::device_to_host_bytes), 2 * 6 * 2 * 8) << "step " << step;
    ASSERT_EQ(lg.device(), Device::cuda);
    const Tensor lg_host = lg.to(Device::cpu);
    expect_close(lg_host, lc, kF32Tol, "log-probabilities at step " + std::to_string(step));
    // The GPU's choice is the CPU twin's on the same log-probabilities, bit for bit.
    const Tensor twin = kernels::beam_topk(lg_host, beam_scores, eos_only, topk);
    EXPECT_EQ(std::memcmp(picks.raw_data(), twin.raw_data(), twin.nbytes()), 0) << "step " << step;
    for (std::size_t r = 0; r < tokens.size(); ++r) tokens[r] = 4 + static_cast<std::int32_t>((r * 7 + step) % 33);
    if (step == 1) {  // beam search reorders and duplicates rows
      const std::vector<std::int64_t> rows{5, 0, 0, 2, 3, 1};
      cc.select_rows(rows);
      gc.select_rows(rows);
    }
  }
}

TEST_F(CudaTransformer, BeamSearchOnTheGpuFindsTheCpuHypotheses) {
  const models::Transformer cpu_model(inference_config(Device::cpu), 6), gpu_model(inference_config(Device::cuda), 6);
  const models::DecodeOptions opt{.beam = 4, .length_penalty = 0.6, .max_extra_len = 5, .sampling = std::nullopt};
  const models::TokenRows c = models::beam_search(cpu_model, src, src_pad, opt);
  const models::TokenRows g = models::beam_search(gpu_model, src, src_pad, opt);
  ASSERT_EQ(g.size(), c.size());
  // Scores agree to ~1e-6; a near-tie between two beams may still order them differently, so one
  // row of six may differ.
  std::size_t same = 0;
  for (std::size_t i = 0; i < c.size(); ++i) same += g[i] == c[i];
  EXPECT_GE(same, c.size() - 1);
}

// ---------------------------------------------------------------- a bf16 step's work, counted
// The dtype casts and host<->device copies (common/counters.h) of bf16 training steps, taken as
// train::Run takes a single-GPU step (run_batch, the clipped gradient norm, Adam); printed for
// docs/gpu.md, whose "bfloat16 weights once per step" the checks cover.
using counters::Event;

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

// `steps` training steps of `model`, as train::Run's single-GPU step takes them; the counts are
// the average over all but the first (a first step's one-time work is not per-step work).
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
  const models::Transformer kept(small_config(Device::cuda, true), 3),
      cast_per_call(small_config(Device::cuda, true), 3);
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
  const models::Transformer trained(small_config(Device::cuda, true), 3), fresh(small_config(Device::cuda, true), 4);
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
