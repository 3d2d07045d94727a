#include "kernels/cuda/dropout.h"

#include "kernels/cuda/device.h"

namespace tessera::cuda {

Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset) {
  const Elem elem = elem_of("cuda::dropout_forward", x);
  TESSERA_CHECK(p >= 0.0 && p < 1.0, "cuda::dropout_forward: probability {} outside [0, 1)", p);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::cuda);
  // Same float threshold and scale as cpu::dropout_forward.
  check_launch("cuda::dropout_forward",
               launch_dropout(x.raw_data(), y.raw_data(), x.numel(), static_cast<float>(p),
                              static_cast<float>(1.0 / (1.0 - p)), seed, offset, elem, nullptr));
  return y;
}

}  // namespace tessera::cuda
