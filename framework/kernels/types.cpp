#include "kernels/types.h"

#include <fmt/ranges.h>

namespace tessera::kernels {

void check_ids(const char* op, const Tensor& ids, std::int64_t vocab, std::optional<std::int32_t> ignore_index) {
  check_cpu(op, ids);
  TESSERA_CHECK(ids.dtype() == DType::i32, "{}: ids must be int32, got {}", op, ids.describe());
  const std::int32_t* p = ids.data<std::int32_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    TESSERA_CHECK((p[i] >= 0 && p[i] < vocab) || (ignore_index && p[i] == *ignore_index),
                  "{}: id {} at flat position {} of ids {} is outside the vocabulary [0, {})", op, p[i], i,
                  shape_str(ids.shape()), vocab);
  }
}

void check_zero_id(const char* op, std::optional<std::int32_t> zero_id) {
  TESSERA_CHECK(!zero_id || *zero_id < 0, "{}: zero_id {} is a row's id (it must be negative)", op, *zero_id);
}

std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> inv(dims.size(), -1);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = dims[i];
    TESSERA_CHECK(d >= 0 && d < static_cast<std::int64_t>(dims.size()) && inv[static_cast<std::size_t>(d)] < 0,
                  "permute: [{}] is not a permutation of 0..{}", fmt::join(dims, ", "),
                  static_cast<std::int64_t>(dims.size()) - 1);
    inv[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(i);
  }
  return inv;
}

}  // namespace tessera::kernels
