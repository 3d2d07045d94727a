#include "nn/positional.h"

#include <cmath>

#include "autograd/ops.h"

namespace tessera::nn {

Tensor sinusoidal_positional_encoding(std::int64_t max_len, std::int64_t d_model, DType dtype) {
  TESSERA_CHECK(max_len > 0 && d_model > 0 && d_model % 2 == 0,
                "sinusoidal_positional_encoding: need max_len > 0 and an even d_model > 0, got {} and {}", max_len,
                d_model);
  std::vector<double> pe(static_cast<std::size_t>(max_len * d_model));
  for (std::int64_t pos = 0; pos < max_len; ++pos) {
    for (std::int64_t i = 0; i < d_model / 2; ++i) {
      const double angle =
          static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(d_model));
      pe[static_cast<std::size_t>(pos * d_model + 2 * i)] = std::sin(angle);
      pe[static_cast<std::size_t>(pos * d_model + 2 * i + 1)] = std::cos(angle);
    }
  }
  return Tensor::from_doubles(pe, {max_len, d_model}, dtype);
}

PositionalEncoding::PositionalEncoding(std::int64_t max_len, std::int64_t d_model, DType dtype, Device device)
    : table_(sinusoidal_positional_encoding(max_len, d_model).to(dtype).to(device)) {}

ag::Var PositionalEncoding::operator()(const ag::Var& x, std::int64_t first_position) const {
  const std::int64_t len = x.shape()[1];
  TESSERA_CHECK(first_position >= 0 && first_position + len <= max_len(),
                "positional encoding: positions {} to {} are beyond the table's {}", first_position,
                first_position + len - 1, max_len());
  return ag::add(x, ag::Var(table_.narrow_rows(first_position, len)));
}

}  // namespace tessera::nn
