// The MPI backend of Communicator (CPU tensors), and the process-level MPI setup.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "dist/communicator.h"

namespace tessera::dist {

// MPI_Init_thread once per process (a no-op when already initialized); MPI_Finalize at exit.
void ensure_mpi_initialized();
bool mpi_initialized();

// For an error that every rank should meet alike (a bad config): whether every rank of the job
// met one within `window_s` seconds, and whether their messages (by `message_hash`) agree. It
// waits on a communicator used for nothing else, since the ranks that did not fail may be inside
// any collective of theirs; it initializes MPI when this rank has not yet (an error before it).
struct ErrorAgreement {
  bool every_rank = false;      // every rank called agree_on_error in time
  bool same_as_rank_0 = false;  // this rank's message is rank 0's
};
ErrorAgreement agree_on_error(std::uint64_t message_hash, double window_s);

// A rank that waits longer than `seconds` inside one blocking collective (another rank died or
// hangs) prints which collective, for how long, and exits with status 1, which makes the
// launcher end the job. 0 turns the watchdog off (the default). That message names `setting` (a
// string literal: what the user sets, "parallel.timeout_s") and this rank, `world_rank` (from the
// launcher's environment) until MPI has started and knows it.
void set_collective_timeout(double seconds, const char* setting, int world_rank);
double collective_timeout();  // the value set, 0 when none
// What that watchdog runs just before it ends the process (one function; null: none), on its own
// thread while the main one waits in the collective: removes what an error's unwinding would have,
// such as translate's unfinished output file.
void at_collective_timeout(void (*cleanup)());
// What that watchdog adds to its message (null: nothing), e.g. which ranks still answer
// (dist/peer_probe.h); called on its thread, before the cleanup.
void at_collective_timeout_explain(std::string (*explain)());
// Marks one blocking wait for a collective (MPI or NCCL) for that watchdog, while alive. Within
// one already alive (a tensor-parallel checkpoint's parallel I/O, whose collectives include
// barriers of our own), the outer one times the whole wait.
class CollectiveWatch {
 public:
  explicit CollectiveWatch(const char* name);
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch&) = delete;
  CollectiveWatch& operator=(const CollectiveWatch&) = delete;

 private:
  bool nested_;
};
// While one is alive, the watchdog lets every wait go on: for a wait known to be long that is not
// a hang, such as the other ranks waiting while rank 0 trains a vocabulary (minutes on a large
// corpus). A rank that dies meanwhile still ends the job through the launcher.
class UntimedCollectives {
 public:
  UntimedCollectives();
  ~UntimedCollectives();
  UntimedCollectives(const UntimedCollectives&) = delete;
  UntimedCollectives& operator=(const UntimedCollectives&) = delete;
};

class MpiCommunicator final : public Communicator {
 public:
  // Wraps (and duplicates, so our traffic never mixes with anyone else's) an MPI communicator.
  static std::unique_ptr<MpiCommunicator> world();
  explicit MpiCommunicator(MPI_Comm comm);  // takes ownership of comm
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

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
  MpiCommunicator* mpi() override { return this; }

  MPI_Comm comm() const { return comm_; }
  // Ranks on this machine and this process's index among them (MPI_COMM_TYPE_SHARED).
  int local_rank() const;  // collective: every rank of the communicator calls it
  int local_size() const;  // likewise

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace tessera::dist
