// The nn layers alone: names, shapes and shards of their parameters, each forward against a
// float64 reference, the key/value cache against attention without it, and float64 gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "gradcheck.h"
#include "kernels/dispatch.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/feed_forward.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/positional.h"

namespace tessera {
namespace {

using testing::random_double;

const nn::Placement kFloat64{.dtype = DType::f64, .device = Device::cpu, .compute = DType::f64};

std::vector<std::string> names_of(const std::vector<nn::Parameter>& params) {
  std::vector<std::string> names;
  for (const nn::Parameter& p : params) {
    names.push_back(p.var.name());
    EXPECT_EQ(p.shard, dist::ShardDim::replicated) << p.var.name();  // no tensor-parallel group
  }
  return names;
}

// Sets every parameter to random values (zero biases and unit gains would hide their use).
void randomize(const std::vector<nn::Parameter>& params, std::uint64_t seed) {
  for (const nn::Parameter& p : params) ag::Var(p.var).value() = random_double(p.var.shape(), seed++);
}

void expect_near(const Tensor& got, const std::vector<double>& expect, double tol, const std::string& what) {
  const std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), expect.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], expect[i], tol) << what << " element " << i;
}

// x [rows, in] W^T + b in double, W [out, in].
std::vector<double> affine(const std::vector<double>& x, const Tensor& w, const Tensor& b) {
  const std::int64_t out = w.size(0), in = w.size(1), rows = static_cast<std::int64_t>(x.size()) / in;
  const std::vector<double> wv = w.to_doubles(), bv = b.to_doubles();
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = bv[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < in; ++i)
        s += x[static_cast<std::size_t>(r * in + i)] * wv[static_cast<std::size_t>(o * in + i)];
      y[static_cast<std::size_t>(r * out + o)] = s;
    }
  return y;
}

TEST(NnLinear, ParametersAreXavierAndZerosAndForwardIsMatmulPlusBias) {
  const nn::Linear fc("fc", 5, 3, 42, kFloat64);
  EXPECT_EQ(names_of(fc.parameters()), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(fc.weight().value().to_doubles(), nn::xavier_uniform(3, 5, 42).to(DType::f64).to_doubles());
  EXPECT_EQ(fc.bias().value().to_doubles(), std::vector<double>(3, 0.0));
  randomize(fc.parameters(), 7);
  const Tensor x = random_double({2, 4, 5}, 1);
  const ag::Var y = fc(ag::Var(x));
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
  expect_near(y.value(), affine(x.to_doubles(), fc.weight().value(), fc.bias().value()), 1e-14, "linear");
}

TEST(NnLayerNorm, MatchesAFloat64Reference) {
  for (DType dt : {DType::f32, DType::f64}) {
    const nn::Placement place{.dtype = dt, .device = Device::cpu, .compute = dt};
    const nn::LayerNorm norm("ln", 6, 1e-5, place);
    EXPECT_EQ(names_of(norm.parameters()), (std::vector<std::string>{"ln.weight", "ln.bias"}));
    EXPECT_EQ(norm.parameters()[0].var.value().to_doubles(), std::vector<double>(6, 1.0));
    for (std::uint64_t s = 0; const nn::Parameter& p : norm.parameters())
      ag::Var(p.var).value() = random_double({6}, 10 + s++).to(dt);
    const Tensor x = random_double({3, 6}, 2, -3, 3).to(dt);
    const std::vector<double> xv = x.to_doubles(), g = norm.parameters()[0].var.value().to_doubles(),
                              b = norm.parameters()[1].var.value().to_doubles();
    std::vector<double> expect;
    for (std::size_t r = 0; r < 3; ++r) {
      double mean = 0, var = 0;
      for (std::size_t i = 0; i < 6; ++i) mean += xv[r * 6 + i] / 6;
      for (std::size_t i = 0; i < 6; ++i) var += (xv[r * 6 + i] - mean) * (xv[r * 6 + i] - mean) / 6;
      for (std::size_t i = 0; i < 6; ++i)
        expect.push_back((xv[r * 6 + i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i]);
    }
    expect_near(norm(ag::Var(x)).value(), expect, dt == DType::f32 ? 1e-5 : 1e-13, std::string(dtype_name(dt)));
  }
}

TEST(NnEmbedding, RowsScaledBySqrtDModelPlusPositions) {
  const nn::Embedding embed("tok", 10, 4, 3, kFloat64);
  EXPECT_EQ(names_of(embed.parameters()), (std::vector<std::string>{"tok.weight"}));
  EXPECT_EQ(embed.weight().value().to_doubles(), nn::embedding_normal(10, 4, 3).to(DType::f64).to_doubles());
  const Tensor ids = Tensor::from(std::vector<std::int32_t>{7, 0, 7, 3}, {2, 2});
  const ag::Var x = embed(ids);
  ASSERT_EQ(x.shape(), (Shape{2, 2, 4}));
  const std::vector<double> table = embed.weight().value().to_doubles(), got = x.value().to_doubles();
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t j = 0; j < 4; ++j)
      EXPECT_DOUBLE_EQ(got[t * 4 + j], 2.0 * table[static_cast<std::size_t>(ids.data<std::int32_t>()[t]) * 4 + j]);

  const nn::PositionalEncoding positions(5, 4, DType::f64, Device::cpu);
  const std::vector<double> pe = nn::sinusoidal_positional_encoding(5, 4).to(DType::f64).to_doubles();
  const std::vector<double> with = positions(x, 3).value().to_doubles();
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(with[t * 4 + j], got[t * 4 + j] + pe[(3 + t % 2) * 4 + j]);
  EXPECT_THROW((void)positions(x, 4), Error);  // positions 4 and 5 of a table of 5
}

TEST(NnFeedForward, IsFc2OfReluOfFc1) {
  std::uint64_t seed = 5;
  const nn::FeedForward ffn("layer", 4, 6, seed, kFloat64);
  EXPECT_EQ(seed, 7u);
  EXPECT_EQ(names_of(ffn.parameters()),
            (std::vector<std::string>{"layer.fc1.weight", "layer.fc1.bias", "layer.fc2.weight", "layer.fc2.bias"}));
  const auto params = ffn.parameters();
  EXPECT_EQ(params[2].var.value().to_doubles(), nn::xavier_uniform(4, 6, 6).to(DType::f64).to_doubles());
  randomize(params, 20);
  const Tensor x = random_double({2, 3, 4}, 3);
  std::vector<double> h = affine(x.to_doubles(), params[0].var.value(), params[1].var.value());
  for (double& e : h) e = std::max(e, 0.0);
  expect_near(ffn(ag::Var(x)).value(), affine(h, params[2].var.value(), params[3].var.value()), 1e-13, "ffn");
  testing::expect_gradients_match([&](const std::vector<ag::Var>& in) { return ffn(in[0]); }, {x});
}

nn::MultiHeadAttention attention_layer() {
  std::uint64_t seed = 100;
  nn::MultiHeadAttention attn("attn", 8, 2, seed, kFloat64);
  EXPECT_EQ(seed, 104u);
  randomize(attn.parameters(), 30);
  return attn;
}

TEST(NnMultiHeadAttention, ParametersAndShapes) {
  const nn::MultiHeadAttention attn = attention_layer();
  std::vector<std::string> expect;
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"})
    for (const char* p : {"weight", "bias"}) expect.push_back(std::string("attn.") + proj + "." + p);
  EXPECT_EQ(names_of(attn.parameters()), expect);
  const ag::Var x(random_double({2, 5, 8}, 1)), memory(random_double({2, 3, 8}, 2));
  EXPECT_EQ(attn(x, x, Tensor(), true).shape(), (Shape{2, 5, 8}));
  EXPECT_EQ(attn(x, memory, Tensor(), false).shape(), (Shape{2, 5, 8}));
  std::uint64_t seed = 0;
  EXPECT_THROW(nn::MultiHeadAttention("bad", 8, 3, seed, kFloat64), Error);  // 8 does not split into 3 heads
}

// Decoding one position at a time with the cache gives each position's row of the full
// (causal self- and padded cross-) attention.
TEST(NnMultiHeadAttention, KeyValueCacheEqualsAttentionWithoutIt) {
  const nn::MultiHeadAttention attn = attention_layer();
  const std::int64_t batch = 2, len = 4, d = 8;
  const Tensor x = random_double({batch, len, d}, 3), memory = random_double({batch, 3, d}, 4);
  const Tensor padding = Tensor::from(std::vector<std::int32_t>{0, 0, 0, 0, 0, 1}, {batch, 3});
  ag::NoGradGuard no_grad;
  const std::vector<double> self_full = attn(ag::Var(x), ag::Var(x), Tensor(), true).value().to_doubles();
  const std::vector<double> cross_full = attn(ag::Var(x), ag::Var(memory), padding, false).value().to_doubles();
  nn::KeyValueCache self;
  const nn::KeyValueCache cross = attn.project_memory(ag::Var(memory));
  for (std::int64_t t = 0; t < len; ++t) {
    Tensor step = Tensor::empty({batch, 1, d}, DType::f64);
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < d; ++j) step.data<double>()[b * d + j] = x.data<double>()[(b * len + t) * d + j];
    const std::vector<double> s = attn.step(ag::Var(step), self).value().to_doubles();
    const std::vector<double> c = attn.attend_cached(ag::Var(step), cross, padding).value().to_doubles();
    ASSERT_EQ(self.length(), t + 1);
    ASSERT_EQ(self.history(false).shape(), (Shape{batch, 2, t + 1, 4}));
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < d; ++j) {
        const auto at = static_cast<std::size_t>((b * len + t) * d + j), here = static_cast<std::size_t>(b * d + j);
        EXPECT_NEAR(s[here], self_full[at], 1e-13) << "self, position " << t;
        EXPECT_NEAR(c[here], cross_full[at], 1e-13) << "cross, position " << t;
      }
  }
  self.select_rows({1});
  EXPECT_EQ(self.rows(), 1);
  EXPECT_EQ(self.length(), len);
}

// The preallocated cache: a capacity of 1 doubles as positions are written (the filled ones kept),
// a reorder gives rows other rows' histories (a row may repeat: beam search), and more rows than
// the buffers hold (a beam's first expansion) grows them. On the CPU the cache is step-major and a
// reorder copies no keys, only each row's lineage.
TEST(NnKeyValueCache, WritesInPlaceGrowsAndReordersRows) {
  const std::int64_t rows = 3, heads = 2, d = 4, steps = 5;
  nn::KeyValueCache cache(1);
  std::vector<Tensor> ks;
  for (std::int64_t t = 0; t < steps; ++t) {
    ks.push_back(random_double({rows, heads, 1, d}, 50 + static_cast<std::uint64_t>(t)));
    cache.append(ks.back(), ks.back());
  }
  ASSERT_TRUE(cache.step_major());
  // Key at (row r, head h, position t) as the cache holds it, and as written.
  auto held = [&](std::int64_t r, std::int64_t h, std::int64_t t) {
    const Tensor k = cache.history(false);
    return std::vector<double>(k.data<double>() + ((r * heads + h) * k.size(2) + t) * d,
                               k.data<double>() + ((r * heads + h) * k.size(2) + t + 1) * d);
  };
  auto written = [&](std::int64_t r, std::int64_t h, std::int64_t t) {
    const double* p = ks[static_cast<std::size_t>(t)].data<double>() + (r * heads + h) * d;
    return std::vector<double>(p, p + d);
  };
  ASSERT_GE(cache.keys().size(0), steps);
  const std::vector<std::int64_t> order{2, 0, 2, 1, 1};
  const void* buffer = cache.keys().raw_data();
  cache.select_rows(order);
  ASSERT_EQ(cache.rows(), 5);
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t t = 0; t < steps; ++t)
      EXPECT_EQ(held(r, 1, t), written(order[static_cast<std::size_t>(r)], 1, t)) << r << " " << t;
  EXPECT_NE(cache.keys().raw_data(), buffer) << "5 rows: the steps were regrown";
  buffer = cache.keys().raw_data();
  cache.select_rows({0, 1});
  EXPECT_EQ(cache.keys().raw_data(), buffer);
  EXPECT_EQ(held(1, 0, 4), written(0, 0, 4));
  EXPECT_THROW(cache.append(ks[0], ks[0]), Error);  // 3 rows into a cache of 2
}

// Beam search's reorders, step after step: most rows keep their place, some take another's
// history, rows repeat, every row changes now and then, and the batch shrinks. Every row's history
// stays what it was written as, while the buffers double (the step-major cache's lineages).
TEST(NnKeyValueCache, ReordersKeepEveryRowsHistory) {
  const std::int64_t heads = 2, d = 3;
  nn::KeyValueCache cache(4);
  std::vector<std::vector<std::vector<double>>> history;  // [row][position] -> heads * d values
  std::mt19937 rng(7);
  std::int64_t rows = 8;
  for (std::int64_t step = 0; step < 12; ++step) {
    const Tensor k = random_double({rows, heads, 1, d}, 100 + static_cast<std::uint64_t>(step));
    cache.append(k, k);
    history.resize(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r)
      history[static_cast<std::size_t>(r)].emplace_back(k.data<double>() + r * heads * d,
                                                        k.data<double>() + (r + 1) * heads * d);
    const std::int64_t next = step == 6 ? rows - 3 : rows;  // three rows leave once
    std::vector<std::int64_t> order(static_cast<std::size_t>(next));
    for (std::int64_t r = 0; r < next; ++r)
      order[static_cast<std::size_t>(r)] = rng() % 3 == 0 ? static_cast<std::int64_t>(rng() % rows) : r;
    if (step % 4 == 3) std::reverse(order.begin(), order.end());  // every row changes
    cache.select_rows(order);
    std::vector<std::vector<std::vector<double>>> moved;
    for (const std::int64_t from : order) moved.push_back(history[static_cast<std::size_t>(from)]);
    history = moved;
    rows = next;
    const Tensor held = cache.history(true);
    ASSERT_EQ(cache.rows(), rows);
    ASSERT_EQ(held.shape(), (Shape{rows, heads, step + 1, d}));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t t = 0; t <= step; ++t)
        for (std::int64_t h = 0; h < heads; ++h)
          for (std::int64_t c = 0; c < d; ++c)
            ASSERT_EQ(
                held.data<double>()[((r * heads + h) * held.size(2) + t) * d + c],
                history[static_cast<std::size_t>(r)][static_cast<std::size_t>(t)][static_cast<std::size_t>(h * d + c)])
                << "step " << step << " row " << r << " position " << t;
  }
}

// A cross-attention cache on the CPU keeps its rows and maps the live ones onto them: reorders
// compose, nothing is copied, and attention through the map equals attention over copied rows.
TEST(NnKeyValueCache, MemoryCacheMapsRowsWithoutCopying) {
  const nn::MultiHeadAttention attn = attention_layer();
  const Tensor memory = random_double({2, 3, 8}, 11);
  const Tensor padding = Tensor::from(std::vector<std::int32_t>{0, 0, 1, 0, 0, 0}, {2, 3});
  ag::NoGradGuard no_grad;
  nn::KeyValueCache cross = attn.project_memory(ag::Var(memory));
  const void* keys = cross.keys().raw_data();
  cross.select_rows({1, 1, 0, 0});
  cross.select_rows({3, 0, 1});
  EXPECT_EQ(cross.keys().raw_data(), keys);
  ASSERT_EQ(cross.rows(), 3);
  ASSERT_TRUE(cross.row_map().defined());
  const std::vector<std::int64_t> rows{0, 1, 1};
  EXPECT_EQ(cross.row_map().to_doubles(), (std::vector<double>{0, 1, 1}));
  const Tensor x = random_double({3, 1, 8}, 12);
  const std::vector<double> mapped = attn.attend_cached(ag::Var(x), cross, padding).value().to_doubles();
  const Tensor copied_memory = kernels::index_rows(memory, rows), copied_padding = kernels::index_rows(padding, rows);
  const nn::KeyValueCache copied = attn.project_memory(ag::Var(copied_memory));
  EXPECT_EQ(mapped, attn.attend_cached(ag::Var(x), copied, copied_padding).value().to_doubles());
  EXPECT_THROW(cross.append(random_double({3, 2, 1, 4}, 13), random_double({3, 2, 1, 4}, 14)), Error);
}

TEST(NnMultiHeadAttention, InputGradientsMatchCentralDifferences) {
  const nn::MultiHeadAttention attn = attention_layer();
  const Tensor padding = Tensor::from(std::vector<std::int32_t>{0, 0, 1, 0, 0, 0}, {2, 3});
  testing::expect_gradients_match([&](const std::vector<ag::Var>& in) { return attn(in[0], in[0], Tensor(), true); },
                                  {random_double({2, 3, 8}, 5)});
  testing::expect_gradients_match([&](const std::vector<ag::Var>& in) { return attn(in[0], in[1], padding, false); },
                                  {random_double({2, 2, 8}, 6), random_double({2, 3, 8}, 7)});
}

// Every parameter's gradient against central differences of L = sum(R * attention(x, memory)).
TEST(NnMultiHeadAttention, ParameterGradientsMatchCentralDifferences) {
  const nn::MultiHeadAttention attn = attention_layer();
  const ag::Var x(random_double({2, 2, 8}, 8)), memory(random_double({2, 3, 8}, 9));
  const Tensor r = random_double({2, 2, 8}, 10);
  const auto loss = [&] { return ag::sum(ag::mul(attn(x, memory, Tensor(), false), ag::Var(r))); };
  loss().backward();
  constexpr double h = 1e-6;
  for (const nn::Parameter& p : attn.parameters()) {
    const std::vector<double> analytic = p.var.grad().to_doubles();
    double* value = ag::Var(p.var).value().data<double>();
    ag::NoGradGuard no_grad;
    for (std::size_t j = 0; j < analytic.size(); ++j) {
      const double saved = value[j];
      value[j] = saved + h;
      const double up = loss().value().item();
      value[j] = saved - h;
      const double down = loss().value().item();
      value[j] = saved;
      EXPECT_NEAR(analytic[j], (up - down) / (2 * h), 1e-7) << p.var.name() << " element " << j;
    }
  }
}

}  // namespace
}  // namespace tessera
