// One communicator, two engines: CPU tensors travel over MPI, CUDA tensors over NCCL, on the same
// ranks. GPU training uses it for every group, so parallel code stays written against
// Communicator alone (the loss sums and stop flags are CPU tensors, gradients and activations
// CUDA ones).
#pragma once

#include <memory>

#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"

namespace tessera::dist {

class DeviceCommunicator final : public Communicator {
 public:
  // Builds the NCCL communicator over `mpi`'s ranks (collective; select the GPU first).
  explicit DeviceCommunicator(std::unique_ptr<MpiCommunicator> mpi);

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  void all_reduce(Tensor& t, ReduceOp op) override { engine(t).all_reduce(t, op); }
  std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) override {
    return engine(t).all_reduce_async(t, op);
  }
  Tensor all_gather(const Tensor& t) override { return engine(t).all_gather(t); }
  Tensor reduce_scatter(const Tensor& t, const std::vector<std::int64_t>& rows, ReduceOp op) override {
    return engine(t).reduce_scatter(t, rows, op);
  }
  std::unique_ptr<Request> reduce_scatter_async(Tensor& t, ReduceOp op) override {
    return engine(t).reduce_scatter_async(t, op);
  }
  std::unique_ptr<Request> all_gather_async(Tensor& t) override { return engine(t).all_gather_async(t); }
  void broadcast(Tensor& t, int root) override { engine(t).broadcast(t, root); }
  void barrier() override { nccl_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key) override;
  MpiCommunicator* mpi() override { return mpi_.get(); }

 private:
  Communicator& engine(const Tensor& t) {
    return t.defined() && t.device() == Device::cuda ? static_cast<Communicator&>(*nccl_) : *mpi_;
  }
  std::unique_ptr<MpiCommunicator> mpi_;  // declared first: NCCL's bootstrap outlives it
  std::unique_ptr<NcclCommunicator> nccl_;
};

}  // namespace tessera::dist
