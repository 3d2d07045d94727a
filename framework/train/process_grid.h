// The processes of a run as a tensor x data grid. World rank r is tensor-parallel rank r % tp of
// data-parallel replica r / tp: tensor-parallel ranks are adjacent, so with ranks placed by
// machine (mpirun's default) a tensor-parallel group stays inside one machine.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "dist/communicator.h"
#include "dist/hosts.h"
#include "io/run_config.h"

namespace tessera::train {

struct ProcessGrid {
  std::unique_ptr<dist::Communicator> world, tensor, data;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;  // local: the ranks on this machine
  std::string gpu;        // train.device = cuda: the GPU this rank uses, e.g. "cuda:1 (NVIDIA H200)"
  dist::RankHosts hosts;  // under MPI: every rank's host and local rank (empty in a lone process)
  bool root() const { return rank == 0; }
};

// Uses MPI when launched by mpirun or when parallel.tensor x parallel.data > 1; otherwise a
// single process without MPI. Throws (on every rank alike) when tensor x data is not the number
// of processes. Under MPI every rank learns every rank's host; rank 0 warns when a tensor-parallel
// group spans hosts. With train.device = cuda each rank takes GPU local_rank % (GPUs it sees), no two ranks
// may share a physical GPU, and the groups
// carry CUDA tensors over NCCL (CPU tensors still over MPI). Under MPI, first of all, every rank
// must have the same effective config and `command_line` (the rest of what it was started with,
// e.g. train's --resume), else every rank throws one EveryRankError.
ProcessGrid make_process_grid(const io::RunConfig& cfg, std::string_view command_line = {});

}  // namespace tessera::train
