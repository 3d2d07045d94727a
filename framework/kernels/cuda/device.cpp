#include "kernels/cuda/device.h"

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

}  // namespace tessera::cuda
