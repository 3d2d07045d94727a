// Sinusoidal positional encoding: the formula, and the property the paper chose it for: for each
// offset k, one fixed linear map M_k gives PE(pos + k) = M_k PE(pos) for every pos.
#include <gtest/gtest.h>

#include <cmath>

#include "nn/positional.h"

namespace tessera {
namespace {

TEST(PositionalEncoding, MatchesTheFormula) {
  const std::int64_t len = 50, d = 16;
  const Tensor pe = nn::sinusoidal_positional_encoding(len, d);
  ASSERT_EQ(pe.shape(), (Shape{len, d}));
  for (std::int64_t pos = 0; pos < len; ++pos) {
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double w = 1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / static_cast<double>(d));
      EXPECT_NEAR(pe.data<float>()[pos * d + 2 * i], std::sin(static_cast<double>(pos) * w), 1e-7);
      EXPECT_NEAR(pe.data<float>()[pos * d + 2 * i + 1], std::cos(static_cast<double>(pos) * w), 1e-7);
    }
  }
  EXPECT_THROW((void)nn::sinusoidal_positional_encoding(10, 7), Error);
}

TEST(PositionalEncoding, FixedLinearMapPerOffset) {
  const std::int64_t len = 512, d = 64;
  const Tensor pe = nn::sinusoidal_positional_encoding(len, d);
  const float* p = pe.data<float>();
  for (std::int64_t k : {1, 2, 5, 17, 100}) {
    // M_k depends on k only: a rotation by angle k*w_i on each (sin, cos) pair, built as a full
    // d x d matrix so the check is a plain matrix-vector product.
    std::vector<double> m(static_cast<std::size_t>(d * d), 0.0);
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double a =
          static_cast<double>(k) / std::pow(10000.0, 2.0 * static_cast<double>(i) / static_cast<double>(d));
      const std::int64_t s = 2 * i, c = 2 * i + 1;
      m[static_cast<std::size_t>(s * d + s)] = std::cos(a);
      m[static_cast<std::size_t>(s * d + c)] = std::sin(a);
      m[static_cast<std::size_t>(c * d + s)] = -std::sin(a);
      m[static_cast<std::size_t>(c * d + c)] = std::cos(a);
    }
    double worst = 0;
    for (std::int64_t pos = 0; pos + k < len; pos += 3) {
      for (std::int64_t r = 0; r < d; ++r) {
        double v = 0;
        for (std::int64_t c = 0; c < d; ++c) v += m[static_cast<std::size_t>(r * d + c)] * p[pos * d + c];
        worst = std::max(worst, std::abs(v - p[(pos + k) * d + r]));
      }
    }
    EXPECT_LE(worst, 1e-6) << "offset " << k;
  }
}

}  // namespace
}  // namespace tessera
