// CUDA dropout against its CPU twin: identical masks for the same (seed, offset).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/dropout.h"

namespace tessera {
namespace {

TEST(CudaDropout, MatchesCpuTwinBitForBit) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t n : {1, 3, 4, 5, 1000, 1 << 20}) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.5f + static_cast<float>(i % 7);
    Tensor x = Tensor::from(v, {n});
    Tensor cpu_y = cpu::dropout_forward(x, 0.1, 1234, 77);
    Tensor gpu_y = cuda::dropout_forward(x.to(Device::cuda), 0.1, 1234, 77).to(Device::cpu);
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(cpu_y.data<float>()[i], gpu_y.data<float>()[i]) << "n=" << n << " i=" << i;
  }
}

}  // namespace
}  // namespace tessera
