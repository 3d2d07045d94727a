// The whole Transformer against golden values from an independent implementation.
//
// tests/golden/make_transformer_golden.py (run once, by hand; committed with its output) builds
// the model of "Attention Is All You Need" from the paper's definitions in float64 PyTorch,
// checks itself against torch.nn.Transformer and finite differences, and writes, for a tiny
// config (vocab 11, d_model 8, 2 heads, d_ff 16, 2 + 2 layers) in post-norm and pre-norm form:
// random weights (layer-norm gains/biases and linear biases included), a ragged batch
// (B = 3, Ls = 5, Lt = 6), the logits, the label-smoothed (0.1) loss summed over non-pad rows,
// and the gradient of that loss for every parameter. Here Tessera's float32 model gets the same
// weights by name and must reproduce all of it. No Python is needed to run this test.
//
// Tolerance: every compared tensor must satisfy max |tessera - golden| <= 1e-4 * max |golden|
// (the key projections' bias gradients, zero in exact arithmetic, use their weight gradient's
// scale instead: see the gradient loop).
// The weights are float32-representable, so the only differences are float32 rounding in
// Tessera's forward and backward (unit roundoff 6e-8, accumulated over ~40 dependent ops and
// reductions of at most 16 terms): measured errors are around 1e-6 of each tensor's scale, so
// 1e-4 leaves ~two orders of magnitude of headroom for other BLAS kernels or summation orders,
// while any change to the model's math (masks, scaling, norm placement, positions, loss
// convention) moves some of these values by far more than 1e-4 of their scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/transformer.h"

namespace tessera {
namespace {

constexpr double kRelTol = 1e-4;

struct Record {
  Shape shape;
  std::vector<double> values;
};

std::string golden_path(const std::string& name) { return std::string(TESSERA_TEST_DATA_DIR) + "/../golden/" + name; }

// Reads "name ndim dims... values..." lines; '#' lines are comments.
std::map<std::string, Record> read_fixture(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open golden fixture " << path;
  std::map<std::string, Record> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string name;
    std::int64_t ndim = 0;
    s >> name >> ndim;
    Record r;
    for (std::int64_t i = 0; i < ndim; ++i) {
      std::int64_t d = 0;
      s >> d;
      r.shape.push_back(d);
    }
    const std::int64_t n = shape_numel(r.shape);
    r.values.resize(static_cast<std::size_t>(n));
    for (auto& v : r.values) s >> v;
    EXPECT_FALSE(s.fail()) << path << ": record '" << name << "' is truncated";
    double extra = 0;
    EXPECT_FALSE(s >> extra) << path << ": record '" << name << "' has more values than its shape";
    EXPECT_TRUE(out.emplace(name, std::move(r)).second) << path << ": duplicate record '" << name << "'";
  }
  return out;
}

const Record& get(const std::map<std::string, Record>& f, const std::string& name) {
  auto it = f.find(name);
  if (it == f.end()) throw std::runtime_error("golden fixture has no record '" + name + "'");
  return it->second;
}

std::int64_t get_int(const std::map<std::string, Record>& f, const std::string& name) {
  return static_cast<std::int64_t>(std::llround(get(f, name).values.at(0)));
}

Tensor ids_tensor(const Record& r) {
  std::vector<std::int32_t> v;
  for (double x : r.values) v.push_back(static_cast<std::int32_t>(std::llround(x)));
  return Tensor::from(v, r.shape);
}

struct Worst {
  double ratio = 0;  // max |error| / (tolerance scale)
  std::string name;
};

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Compares a tensor with its golden record; the scale is the golden tensor's max magnitude, or
// `zero_scale` for a tensor that is zero in exact arithmetic (see the gradient loop).
void expect_close(const std::string& what, const Tensor& actual, const Record& golden, Worst& worst,
                  double zero_scale = 0) {
  ASSERT_EQ(actual.shape(), golden.shape) << what;
  const std::vector<double> a = actual.to_doubles();
  const double scale = zero_scale > 0 ? zero_scale : max_abs(golden.values);
  double err = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - golden.values[i]);
    if (!(e <= err)) {  // also catches NaN
      err = e;
      at = i;
    }
  }
  ASSERT_GT(scale, 0.0) << what << ": golden tensor is all zeros, which would test nothing";
  EXPECT_LE(err, kRelTol * scale) << what << ": max |error| " << err << " at flat index " << at << " (tessera " << a[at]
                                  << ", golden " << golden.values[at] << "), tolerance " << kRelTol
                                  << " * max |golden| = " << kRelTol * scale;
  if (err / scale > worst.ratio) worst = {err / scale, what};
}

void check_against_golden(const std::string& fixture) {
  const auto f = read_fixture(golden_path(fixture));
  ASSERT_FALSE(f.empty());

  models::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = get_int(f, "config/vocab");
  c.d_model = get_int(f, "config/d_model");
  c.heads = get_int(f, "config/heads");
  c.d_ff = get_int(f, "config/d_ff");
  c.encoder_layers = get_int(f, "config/encoder_layers");
  c.decoder_layers = get_int(f, "config/decoder_layers");
  c.pre_norm = get_int(f, "config/pre_norm") != 0;
  c.layer_norm_eps = get(f, "config/layer_norm_eps").values.at(0);
  c.dropout = 0.0;
  c.share_embeddings = true;
  c.tie_output = true;
  const double smoothing = get(f, "config/label_smoothing").values.at(0);
  models::Transformer m(c, 1);  // the seed does not matter: every weight is overwritten

  // Every model parameter from the fixture, by name; and no fixture weight left unused.
  std::size_t fixture_params = 0;
  for (const auto& [name, r] : f) fixture_params += name.rfind("param/", 0) == 0;
  ASSERT_EQ(fixture_params, m.parameters().size()) << "fixture and model have different parameter sets";
  for (const ag::Var& p : m.parameters()) {
    auto it = f.find("param/" + p.name());
    ASSERT_NE(it, f.end()) << "golden fixture has no weights for parameter '" << p.name() << "'";
    ASSERT_EQ(p.shape(), it->second.shape) << p.name();
    ag::Var handle = p;  // shares the node: writes reach the model
    handle.value() = Tensor::from_doubles(it->second.values, it->second.shape, handle.value().dtype());
    ASSERT_EQ(m.parameter(p.name()).value().to_doubles(), handle.value().to_doubles()) << p.name();
  }

  const Tensor src = ids_tensor(get(f, "input/src"));
  const Tensor pad = ids_tensor(get(f, "input/src_padding"));
  const Tensor tgt_in = ids_tensor(get(f, "input/tgt_in"));
  const Tensor tgt_out = ids_tensor(get(f, "input/tgt_out"));
  const std::int64_t rows = tgt_out.numel();

  models::DropoutStream drop;  // training = false: no dropout
  const ag::Var logits = m.forward(src, pad, tgt_in, drop);
  Worst worst;
  expect_close("logits", logits.value(), get(f, "output/logits"), worst);
  const double logits_ratio = worst.ratio;

  // The trainer's loss (run_batch in framework/train/run.cpp): summed label-smoothed cross entropy, pad ignored.
  ag::Var loss = ag::cross_entropy(ag::reshape(logits, {rows, c.tgt_vocab}), tgt_out.reshape({rows}), smoothing, 0);
  const Record& golden_loss = get(f, "output/loss");
  EXPECT_NEAR(loss.value().item(), golden_loss.values.at(0), kRelTol * std::abs(golden_loss.values.at(0)));
  if (const double e = std::abs(loss.value().item() - golden_loss.values.at(0)) / std::abs(golden_loss.values.at(0));
      e > worst.ratio)
    worst = {e, "loss"};

  loss.backward();
  Worst worst_grad;
  std::size_t grads = 0;
  std::vector<std::string> zero_grads;
  for (const ag::Var& p : m.parameters()) {
    ASSERT_TRUE(p.grad().defined()) << "no gradient reached " << p.name();
    const Record& golden = get(f, "grad/" + p.name());
    // Some gradients are zero in exact arithmetic: a key projection's bias adds q.b_k to every
    // score of a query, which the softmax cancels. The golden value is then ~1e-17 and float32
    // leaves rounding noise of the size of the rounding in the layer's weight gradient, so such
    // a tensor is compared on the scale of the same layer's weight gradient instead of its own.
    double zero_scale = 0;
    const std::string suffix = ".bias";
    if (p.name().size() > suffix.size() && p.name().ends_with(suffix)) {
      const std::string weight = p.name().substr(0, p.name().size() - suffix.size()) + ".weight";
      const double weight_scale = max_abs(get(f, "grad/" + weight).values);
      if (max_abs(golden.values) <= 1e-9 * weight_scale) {
        zero_scale = weight_scale;
        zero_grads.push_back(p.name());
      }
    }
    expect_close("grad " + p.name(), p.grad(), golden, worst_grad, zero_scale);
    ++grads;
  }
  // Exactly the key-projection biases (one per attention block) have identically zero gradients.
  const auto attention_blocks = static_cast<std::size_t>(c.encoder_layers + 2 * c.decoder_layers);
  EXPECT_EQ(zero_grads.size(), attention_blocks);
  for (const auto& name : zero_grads) EXPECT_TRUE(name.ends_with(".k_proj.bias")) << name;
  std::printf(
      "[%s] logits max |err| / max |golden| = %.3g; worst of logits+loss %.3g (%s); "
      "worst of %zu gradients %.3g (%s); tolerance %.0e\n",
      fixture.c_str(), logits_ratio, worst.ratio, worst.name.c_str(), grads, worst_grad.ratio, worst_grad.name.c_str(),
      kRelTol);
}

TEST(GoldenTransformer, PostNormMatchesIndependentImplementation) { check_against_golden("transformer_post_norm.txt"); }

TEST(GoldenTransformer, PreNormMatchesIndependentImplementation) { check_against_golden("transformer_pre_norm.txt"); }

}  // namespace
}  // namespace tessera
