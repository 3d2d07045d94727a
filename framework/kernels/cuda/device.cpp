#include "kernels/cuda/device.h"

#include "kernels/types.h"

namespace tessera::cuda {

Elem elem_of(const char* op, const Tensor& t) {
  check_on_gpu(op, t);
  TESSERA_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16, "{}: expects float32 or bfloat16, got {}", op,
                t.describe());
  return t.dtype() == DType::bf16 ? Elem::bf16 : Elem::f32;
}

void check_on_gpu(const char* op, const Tensor& t) {
  TESSERA_CHECK(t.defined() && t.device() == Device::cuda, "{}: expects a CUDA tensor, got {}", op,
                t.defined() ? t.describe() : std::string("an undefined tensor"));
}

void check_launch(const char* op, cudaError_t err) {
  TESSERA_CHECK(err == cudaSuccess, "{}: CUDA launch failed: {}", op, cudaGetErrorString(err));
}

Tensor ids_on_gpu(const Tensor& ids) {
  TESSERA_CHECK(ids.dtype() == DType::i32, "ids must be int32, got {}", ids.describe());
  return ids.to(Device::cuda);
}

// Ids are checked on the host (a GPU kernel reading out of range fails far from the cause).
Tensor checked_ids(const char* op, const Tensor& ids, std::int64_t vocab, std::optional<std::int32_t> ignore_index) {
  TESSERA_CHECK(ids.dtype() == DType::i32, "{}: ids must be int32, got {}", op, ids.describe());
  kernels::check_ids(op, ids.to(Device::cpu), vocab, ignore_index);
  return ids.to(Device::cuda);
}

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), Device::cuda); }

Tensor f32_on_gpu(const Shape& shape) { return Tensor::empty(shape, DType::f32, Device::cuda); }

void check_f32_gpu(const char* op, const Tensor& t, const char* what) {
  check_on_gpu(op, t);
  TESSERA_CHECK(t.dtype() == DType::f32, "{}: {} must be float32, got {}", op, what, t.describe());
}

}  // namespace tessera::cuda
