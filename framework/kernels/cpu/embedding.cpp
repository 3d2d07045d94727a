#include "kernels/cpu/embedding.h"

#include <cstring>

namespace tessera::cpu {

Tensor embedding_forward(const Tensor& weight, const Tensor& ids, std::optional<std::int32_t> zero_id) {
  check_rank("embedding", weight, 2, "weight");
  check_float("embedding", weight);
  const std::int64_t vocab = weight.size(0), d = weight.size(1);
  kernels::check_zero_id("embedding", zero_id);
  kernels::check_ids("embedding", ids, vocab, zero_id);
  Shape shape = ids.shape();
  shape.push_back(d);
  Tensor out = Tensor::empty(shape, weight.dtype());
  const std::size_t row_bytes = static_cast<std::size_t>(d) * dtype_size(weight.dtype());
  const std::int32_t* id = ids.data<std::int32_t>();
  const char* w = static_cast<const char*>(weight.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const std::int64_t n = ids.numel();
#pragma omp parallel for schedule(static) if (n * d > 32768)
  for (std::int64_t i = 0; i < n; ++i) {
    if (id[i] < 0)  // zero_id (checked above)
      std::memset(o + i * row_bytes, 0, row_bytes);
    else
      std::memcpy(o + i * row_bytes, w + id[i] * row_bytes, row_bytes);
  }
  return out;
}

void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids, std::optional<std::int32_t> zero_id) {
  check_rank("embedding_backward", dweight, 2, "dweight");
  const std::int64_t vocab = dweight.size(0), d = dweight.size(1);
  kernels::check_zero_id("embedding_backward", zero_id);
  kernels::check_ids("embedding_backward", ids, vocab, zero_id);
  TESSERA_CHECK(dout.numel() == ids.numel() * d, "embedding_backward: gradient {} does not match ids {} x dim {}",
                shape_str(dout.shape()), shape_str(ids.shape()), d);
  check_same_dtype("embedding_backward", dweight, dout);
  dispatch_float("embedding_backward", dweight.dtype(), [&]<typename T>() {
    const std::int32_t* id = ids.data<std::int32_t>();
    const T* g = dout.data<T>();
    T* w = dweight.data<T>();
    // Parallel over embedding columns: threads never write the same element, and repeated
    // ids accumulate in a fixed order (deterministic).
#pragma omp parallel for schedule(static) if (ids.numel() * d > 32768)
    for (std::int64_t c = 0; c < d; ++c) {
      for (std::int64_t i = 0; i < ids.numel(); ++i)
        if (id[i] >= 0) w[id[i] * d + c] += g[i * d + c];
    }
  });
}

}  // namespace tessera::cpu
