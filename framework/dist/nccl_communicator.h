// The NCCL backend of Communicator (CUDA tensors, one GPU per process). Built where CUDA is;
// bootstrapped over MPI: rank 0 calls ncclGetUniqueId, MPI_Bcast shares it, every rank calls
// ncclCommInitRank. Sub-groups come from ncclCommSplit. Collectives run on the communicator's
// own stream; blocking calls wait for it, async ones return a request backed by a CUDA event.
#pragma once

#include <nccl.h>

#include "dist/mpi_communicator.h"

namespace tessera::dist {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks; uses the current CUDA device (select it first, e.g. by
  // local rank).
  explicit NcclCommunicator(MpiCommunicator& bootstrap);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(Tensor& t, ReduceOp op) override;
  std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) override;
  Tensor all_gather(const Tensor& t) override;
  Tensor reduce_scatter(const Tensor& t, const std::vector<std::int64_t>& rows, ReduceOp op) override;
  std::unique_ptr<Request> reduce_scatter_async(Tensor& t, ReduceOp op) override;
  std::unique_ptr<Request> all_gather_async(Tensor& t) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  NcclCommunicator(ncclComm_t comm, std::unique_ptr<MpiCommunicator> sizes);
  void create_stream();
  void after_compute();  // the communicator's stream waits for the work queued on the default stream
  void enqueue_all_reduce(Tensor& t, ReduceOp op);
  // Waits for the communicator's stream; `what` names the wait if parallel.timeout_s ends it.
  void synchronize(const char* what);
  ncclComm_t comm_ = nullptr;
  void* stream_ = nullptr;                // cudaStream_t
  void* compute_done_ = nullptr;          // cudaEvent_t
  std::unique_ptr<MpiCommunicator> mpi_;  // the same ranks over MPI: exchanges uneven sizes
  MpiCommunicator* bootstrap_ = nullptr;  // mpi_ or the constructor's argument
  int rank_ = 0, size_ = 1;
};

}  // namespace tessera::dist
