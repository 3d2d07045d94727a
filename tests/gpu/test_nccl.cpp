// The NCCL backend on one GPU (a group of one): collectives move CUDA tensors and give the
// identity; split and uneven shapes go through. Multi-GPU runs are the CUDA issue's.
#include <gtest/gtest.h>

#include "dist/nccl_communicator.h"
#include "gpu_test_util.h"

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

}  // namespace
}  // namespace tessera
