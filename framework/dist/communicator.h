// Collective communication between the processes of a run, independent of the transport: the
// MPI backend moves CPU tensors (tests, CPU clusters), the NCCL backend CUDA tensors. Models and
// the trainer see only this interface.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace tessera::dist {

enum class ReduceOp { sum, average };
class MpiCommunicator;

// A non-blocking collective in flight; wait() returns when its result is in place (and rethrows
// its failure). Destroying an unfinished request waits for it.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  // True once the operation has finished (drives progress; never blocks).
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the element-wise sum (or mean) of all ranks' tensors.
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) = 0;
  // Concatenation along dim 0 of every rank's tensor, in rank order; dim 0 may differ per rank.
  virtual Tensor all_gather(const Tensor& t) = 0;
  // The element-wise reduction of every rank's `t`, split along dim 0 into `rows[r]` rows for
  // rank r (sum(rows) == t.size(0)); returns this rank's part.
  virtual Tensor reduce_scatter(const Tensor& t, const std::vector<std::int64_t>& rows, ReduceOp op) = 0;
  // Non-blocking and in place, in equal blocks (ZeRO's gradient buckets): `t` holds size() blocks;
  // block rank() receives the reduction of every rank's block rank(), the others are left undefined.
  virtual std::unique_ptr<Request> reduce_scatter_async(Tensor& t, ReduceOp op) = 0;
  // Non-blocking and in place: `t` holds size() equal blocks, block rank() this rank's; every rank
  // ends with every rank's block (ZeRO's updated parameters).
  virtual std::unique_ptr<Request> all_gather_async(Tensor& t) = 0;
  // In place: every rank ends with root's tensor.
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new communicator, ordered by key (then by rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // The MPI communicator over the same ranks, where there is one (parallel HDF5 needs MPI-IO).
  virtual MpiCommunicator* mpi() { return nullptr; }
};

// How many ranks of `comm` have `flag` set (comm null: this process alone): a decision every rank
// then takes alike.
int count_ranks(bool flag, Communicator* comm);
// Rank 0's `value` on every rank of `comm` (comm null: `value`).
std::uint64_t broadcast_u64(std::uint64_t value, Communicator* comm);

// The first two ranks of `comm` (in rank order) whose GPU `uuid` (CudaDevice::uuid) is the same,
// where any two are: NCCL needs a GPU of its own for each rank. Collective.
std::optional<std::pair<int, int>> ranks_sharing_a_gpu(Communicator& comm, const std::array<std::int32_t, 4>& uuid);

// dim-0 sizes of an even split of n rows over `parts` (the first n % parts get one more).
std::vector<std::int64_t> even_split(std::int64_t n, int parts);
// Elements in one dim-0 row of `t` (the product of its other dims: also right for a tensor with
// no rows, whose rank must still post the others' counts).
std::int64_t row_elements(const Tensor& t);
// Throws unless `rows` gives each of `ranks` ranks a share (none negative) of `total` rows: what
// reduce_scatter's callers must pass.
void check_row_shares(const std::vector<std::int64_t>& rows, int ranks, std::int64_t total);
// Throws unless `t` splits into `ranks` equal blocks: what reduce_scatter_async and
// all_gather_async's callers must pass (`op` names the call).
void check_equal_blocks(const char* op, const Tensor& t, int ranks);

// Every rank's int32 sequences (of any lengths), in rank order, on every rank of `comm`: their
// lengths, then their ids, in two all_gathers (so at most 2^31 - 1 ids in all).
std::vector<std::vector<std::int32_t>> all_gather_sequences(Communicator& comm,
                                                            const std::vector<std::vector<std::int32_t>>& mine);

}  // namespace tessera::dist
