#include "kernels/cuda/dropout.h"

#include "kernels/cuda/launch.h"

namespace tessera::cuda {

Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset) {
  TESSERA_CHECK(x.device() == Device::cuda && x.dtype() == DType::f32,
                "cuda::dropout_forward: expects a float32 cuda tensor, got {}", x.describe());
  TESSERA_CHECK(p >= 0.0 && p < 1.0, "cuda::dropout_forward: probability {} outside [0, 1)", p);
  Tensor y = Tensor::empty(x.shape(), DType::f32, Device::cuda);
  // Same float threshold and scale as cpu::dropout_forward.
  const cudaError_t err =
      launch_dropout(static_cast<const float*>(x.raw_data()), static_cast<float*>(y.raw_data()), x.numel(),
                     static_cast<float>(p), static_cast<float>(1.0 / (1.0 - p)), seed, offset, nullptr);
  TESSERA_CHECK(err == cudaSuccess, "cuda::dropout_forward: launch on {} failed: {}", x.describe(),
                cudaGetErrorString(err));
  return y;
}

}  // namespace tessera::cuda
