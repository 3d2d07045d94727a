// The CUDA emulator's NCCL on two ranks (mpirun -np 2): a collective is queued on its stream and
// completes only once both ranks have reached it; what must wait for it does, what need not does
// not, work touching its buffers unordered (a race on a GPU) reads NaN or is reported, and a
// communicator's split or destroy waits for its queued collectives.
#include <cuda_bf16.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <functional>
#include <vector>

#include "device_array.h"
#include "emulator_cases.h"

namespace tessera::cuda_emulator {
namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

class EmulatedNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    ncclUniqueId id{};
    if (world_rank() == 0) {
      ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    }
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ASSERT_EQ(ncclCommInitRank(&comm_, 2, id, world_rank()), ncclSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), cudaSuccess);
    x_.write(std::vector<float>(4, static_cast<float>(world_rank() + 1)));  // 1 and 2: the sum is 3
  }
  void TearDown() override {
    cudaDeviceSynchronize();
    cudaGetLastError();
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  // x summed over the ranks on `stream`, done_ recorded after it. Rank 1 reaches it only once
  // rank 0 has queued it and run `while_alone` (a message from rank 0 lets it go), so what rank 0
  // sees meanwhile does not depend on timing.
  void all_reduce_x(
      cudaStream_t stream, const std::function<void()>& while_alone = [] {}) {
    int go = 1;
    if (world_rank() == 1) MPI_Recv(&go, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(ncclAllReduce(x_.data, x_.data, 4, ncclFloat32, ncclSum, comm_, stream), ncclSuccess);
    EXPECT_EQ(cudaEventRecord(done_, stream), cudaSuccess);
    if (world_rank() == 0) {
      while_alone();
      MPI_Send(&go, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  DeviceArray<float> x_{4}, y_{4};
};

TEST_F(EmulatedNccl, ACollectiveCompletesOnceEveryRankHasReachedIt) {
  all_reduce_x(stream_, [this] {
    // Rank 1 has not reached it: not done however often rank 0 asks ("not ready" is kept as the
    // last error too).
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(cudaEventQuery(done_), cudaErrorNotReady);
      EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    // A kernel on the legacy default stream does not wait for a non-blocking stream: it reads the
    // buffer in flight, as NaN.
    EXPECT_EQ(cases::copy(x_.data, y_.data, 4), cudaSuccess);
    for (float v : y_.read()) EXPECT_TRUE(std::isnan(v));
  });
  // Rank 0's first query, too, is "not ready" (a collective is never done at its first check).
  EXPECT_EQ(cudaEventQuery(done_), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  EXPECT_EQ(cudaEventSynchronize(done_), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done_), cudaSuccess);
  EXPECT_EQ(x_.read(), std::vector<float>(4, 3.0f));
}

TEST_F(EmulatedNccl, WorkOrderedAfterACollectiveSeesItsResult) {
  all_reduce_x(stream_);
  ASSERT_EQ(cases::copy(x_.data, y_.data, 4, stream_), cudaSuccess);  // on its stream
  EXPECT_EQ(y_.read(), std::vector<float>(4, 3.0f));
  all_reduce_x(stream_);                                        // 3 + 3
  ASSERT_EQ(cudaStreamWaitEvent(nullptr, done_), cudaSuccess);  // the default stream made to wait
  ASSERT_EQ(cases::copy(x_.data, y_.data, 4), cudaSuccess);
  EXPECT_EQ(y_.read(), std::vector<float>(4, 6.0f));
  // The legacy default stream waits for a blocking stream's work, and its own waits come before
  // a blocking stream's later work.
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  all_reduce_x(blocking);  // 6 + 6
  ASSERT_EQ(cases::copy(x_.data, y_.data, 4), cudaSuccess);
  EXPECT_EQ(y_.read(), std::vector<float>(4, 12.0f));
  all_reduce_x(stream_);  // 12 + 12
  ASSERT_EQ(cudaStreamWaitEvent(nullptr, done_), cudaSuccess);
  ASSERT_EQ(cases::copy(x_.data, y_.data, 4, blocking), cudaSuccess);
  EXPECT_EQ(y_.read(), std::vector<float>(4, 24.0f));
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(EmulatedNccl, CollectivesOnOneStreamRunInOrder) {
  // Each all-reduce reads what the one before it wrote; an average in bfloat16 (through float32).
  DeviceArray<__nv_bfloat16> h(2);
  h.write({__float2bfloat16(static_cast<float>(world_rank())), __float2bfloat16(1.0f)});
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(ncclAllReduce(x_.data, x_.data, 4, ncclFloat32, ncclSum, comm_, stream_), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(h.data, h.data, 2, ncclBfloat16, ncclAvg, comm_, stream_), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(x_.read(), std::vector<float>(4, 12.0f));  // 1 + 2, 3 + 3, 6 + 6
  const std::vector<__nv_bfloat16> avg = h.read();
  EXPECT_EQ(__bfloat162float(avg[0]), 0.5f);
  EXPECT_EQ(__bfloat162float(avg[1]), 1.0f);
}

TEST_F(EmulatedNccl, ReduceScatterAndInPlaceAllGather) {
  // x = {r + 1, r + 2, r + 3, r + 4} on rank r: rank r gets the sums of block r (2 elements).
  const int r = world_rank();
  x_.write({r + 1.0f, r + 2.0f, r + 3.0f, r + 4.0f});
  DeviceArray<float> block(2);
  ASSERT_EQ(ncclReduceScatter(x_.data, block.data, 2, ncclFloat32, ncclSum, comm_, stream_), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(block.read(), r == 0 ? std::vector<float>({3, 5}) : std::vector<float>({7, 9}));
  // In place: the receive buffer is this rank's block of the send buffer.
  ASSERT_EQ(ncclReduceScatter(x_.data, x_.data + 2 * r, 2, ncclFloat32, ncclSum, comm_, stream_), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const std::vector<float> summed = x_.read();
  EXPECT_EQ(std::vector<float>(summed.begin() + 2 * r, summed.begin() + 2 * r + 2), block.read());
  // bfloat16, averaged through float32.
  DeviceArray<__nv_bfloat16> h(2), h_block(1);
  h.write({__float2bfloat16(static_cast<float>(r)), __float2bfloat16(2.0f * static_cast<float>(r))});
  ASSERT_EQ(ncclReduceScatter(h.data, h_block.data, 1, ncclBfloat16, ncclAvg, comm_, stream_), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(__bfloat162float(h_block.read()[0]), r == 0 ? 0.5f : 1.0f);
  // In place: each rank's block of y is its own; both end with both blocks.
  y_.write({r == 0 ? 10.0f : -1.0f, r == 0 ? 11.0f : -1.0f, r == 1 ? 20.0f : -1.0f, r == 1 ? 21.0f : -1.0f});
  ASSERT_EQ(ncclAllGather(y_.data + 2 * r, y_.data, 2, ncclFloat32, comm_, stream_), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(y_.read(), std::vector<float>({10, 11, 20, 21}));
}

TEST_F(EmulatedNccl, WorkTouchingABufferInFlightIsReported) {
  // A kernel writing the buffer an all-reduce will write, unordered: reported when it completes.
  all_reduce_x(stream_);
  y_.write({7, 7, 7, 7});
  ASSERT_EQ(cases::copy(y_.data, x_.data, 4), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  // A kernel changing the buffer a broadcast's root reads.
  ASSERT_EQ(ncclBroadcast(x_.data, y_.data, 4, ncclFloat32, 0, comm_, stream_), ncclSuccess);
  if (world_rank() == 0) {
    ASSERT_EQ(cases::copy(y_.data, x_.data, 4), cudaSuccess);  // y is NaN in flight: x changes
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  } else {
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }
}

TEST_F(EmulatedNccl, SplitAndDestroyFinishQueuedCollectivesFirst) {
  // As NCCL, a split or a destroy first finishes the communicator's queued collectives, so MPI
  // meets them in one order on every rank. Each time the second all-reduce has not started on
  // rank 0 (it waits for the first, whose first check is "not ready").
  const auto all_reduce_twice = [this](ncclComm_t comm) {
    for (int i = 0; i < 2; ++i)
      ASSERT_EQ(ncclAllReduce(x_.data, x_.data, 4, ncclFloat32, ncclSum, comm, stream_), ncclSuccess);
  };
  all_reduce_twice(comm_);  // 1 + 2, 3 + 3
  // Rank 1 waits for both (its second completes only once rank 0 has started it): rank 0 splitting
  // first would wait for rank 1 in MPI_Comm_split while rank 1 waits for it, a deadlock.
  if (world_rank() == 1) {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }
  ncclComm_t both = nullptr;
  ASSERT_EQ(ncclCommSplit(comm_, 0, world_rank(), &both, nullptr), ncclSuccess);
  all_reduce_twice(both);  // 6 + 6, 12 + 12
  // Destroyed with the second still queued: it must not start on a freed communicator.
  ASSERT_EQ(ncclCommDestroy(both), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(x_.read(), std::vector<float>(4, 24.0f));
}

}  // namespace
}  // namespace tessera::cuda_emulator

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();  // each rank reports; a failure on either fails the run
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
