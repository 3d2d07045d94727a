// The NCCL backend on one GPU (a group of one): collectives move CUDA tensors and give the
// identity; split and uneven shapes go through. Multi-GPU runs are the CUDA issue's.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dist/nccl_communicator.h"
#include "gpu_test_util.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"

namespace tessera {
namespace {

TEST(Nccl, SingleRankCollectives) {
  SKIP_WITHOUT_GPU();
  auto world = dist::MpiCommunicator::world();
  dist::NcclCommunicator nccl(*world);
  ASSERT_EQ(nccl.size(), 1);
  Tensor x = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor g = x.to(Device::cuda);
  nccl.all_reduce(g, dist::ReduceOp::sum);
  EXPECT_EQ(g.to(Device::cpu).to_doubles(), x.to_doubles());
  nccl.all_reduce_async(g, dist::ReduceOp::average)->wait();
  EXPECT_EQ(g.to(Device::cpu).to_doubles(), x.to_doubles());
  EXPECT_EQ(nccl.all_gather(g).to(Device::cpu).to_doubles(), x.to_doubles());
  EXPECT_EQ(nccl.reduce_scatter(g, {3}, dist::ReduceOp::sum).to(Device::cpu).to_doubles(), x.to_doubles());
  // No rows, and shares that do not add up (NCCL could not tell: it would read past the tensor).
  const Tensor none = Tensor::zeros({0, 2}, DType::f32).to(Device::cuda);
  EXPECT_EQ(nccl.all_gather(none).shape(), (Shape{0, 2}));
  EXPECT_THROW(nccl.reduce_scatter(g, {4}, dist::ReduceOp::sum), Error);
  nccl.broadcast(g, 0);
  auto sub = nccl.split(0, 0);
  EXPECT_EQ(sub->size(), 1);
  nccl.barrier();
}

// test() on a collective still under way (queued behind a long GEMM): false, and the launches
// after it work. cudaEventQuery's "not ready" stayed as the thread's last error, which the next
// kernel launch's check reported as its own failure: data-parallel GPU training (the gradient
// reducer tests its buckets after each backward hook) failed at its first step.
TEST(Nccl, TestingAnUnfinishedCollectiveLeavesNoErrorBehind) {
  SKIP_WITHOUT_GPU();
  auto world = dist::MpiCommunicator::world();
  dist::NcclCommunicator nccl(*world);
  const Tensor a = Tensor::full({4096, 4096}, 1.0f).to(Device::cuda);
  Tensor g = Tensor::from(std::vector<float>{1, 2, 3, 4}, {2, 2}).to(Device::cuda);
  const Tensor other = g.clone();  // read while g's all-reduce is in flight (reading g would race)
  for (int i = 0; i < 8; ++i) (void)cuda::matmul(a, a, false, false);  // ~1 TFLOP queued ahead
  const std::unique_ptr<dist::Request> pending = nccl.all_reduce_async(g, dist::ReduceOp::sum);
  const bool done_at_once = pending->test();
  const Tensor y = cuda::unary(cpu::UnaryOp::neg, other);  // threw "device not ready"
  pending->wait();
  EXPECT_TRUE(pending->test());
  EXPECT_EQ(y.to(Device::cpu).to_doubles(), (std::vector<double>{-1, -2, -3, -4}));
  EXPECT_EQ(g.to(Device::cpu).to_doubles(), (std::vector<double>{1, 2, 3, 4}));  // one rank's sum
  if (done_at_once) GTEST_SKIP() << "the collective finished before test(): the not-ready path did not run";
}

}  // namespace
}  // namespace tessera
