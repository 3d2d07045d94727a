// A group of one process: every collective is the identity. Lets single-process runs take the
// same code path as distributed ones, without MPI.
#pragma once

#include "dist/communicator.h"

namespace tessera::dist {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(Tensor&, ReduceOp) override {}
  std::unique_ptr<Request> all_reduce_async(Tensor&, ReduceOp) override { return done(); }
  Tensor all_gather(const Tensor& t) override { return t.clone(); }
  Tensor reduce_scatter(const Tensor& t, const std::vector<std::int64_t>&, ReduceOp) override { return t.clone(); }
  std::unique_ptr<Request> reduce_scatter_async(Tensor&, ReduceOp) override { return done(); }
  std::unique_ptr<Request> all_gather_async(Tensor&) override { return done(); }
  void broadcast(Tensor&, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<LocalCommunicator>(); }

 private:
  static std::unique_ptr<Request> done() {
    struct Done final : Request {
      void wait() override {}
      bool test() override { return true; }
    };
    return std::make_unique<Done>();
  }
};

}  // namespace tessera::dist
