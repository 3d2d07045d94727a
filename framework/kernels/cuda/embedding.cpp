#include "kernels/cuda/embedding.h"

#include <optional>

#include "kernels/cuda/device.h"
#include "kernels/types.h"

namespace tessera::cuda {

Tensor embedding_forward(const Tensor& weight, const Tensor& ids, std::optional<std::int32_t> zero_id) {
  const char* op = "cuda::embedding_forward";
  const Elem elem = elem_of(op, weight);
  check_rank(op, weight, 2, "weight");
  kernels::check_zero_id(op, zero_id);
  const Tensor gids = checked_ids(op, ids, weight.size(0), zero_id);
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.dtype(), Device::cuda);
  check_launch(op, launch_embedding_forward(weight.raw_data(), static_cast<const std::int32_t*>(gids.raw_data()),
                                            out.raw_data(), ids.numel(), weight.size(1), elem, nullptr));
  return out;
}

void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids, std::optional<std::int32_t> zero_id) {
  const char* op = "cuda::embedding_backward";
  check_f32_gpu(op, dweight, "dweight");
  check_rank(op, dweight, 2, "dweight");
  const Elem elem = elem_of(op, dout);
  TESSERA_CHECK(dout.numel() == ids.numel() * dweight.size(1), "{}: dout {} does not fit ids {} and dweight {}", op,
                dout.describe(), ids.describe(), dweight.describe());
  kernels::check_zero_id(op, zero_id);
  const Tensor gids = checked_ids(op, ids, dweight.size(0), zero_id);
  check_launch(op, launch_embedding_backward(static_cast<float*>(dweight.raw_data()), dout.raw_data(),
                                             static_cast<const std::int32_t*>(gids.raw_data()), ids.numel(),
                                             dweight.size(1), elem, nullptr));
}

}  // namespace tessera::cuda
