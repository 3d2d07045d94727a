// The processes of a run as a tensor x data grid. World rank r is tensor-parallel rank r % tp of
// data-parallel replica r / tp: tensor-parallel ranks are adjacent, so with ranks placed by
// machine (mpirun's default) a tensor-parallel group stays inside one machine.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "dist/communicator.h"
#include "io/run_config.h"

namespace tessera::launch {

struct ProcessGrid {
  std::unique_ptr<dist::Communicator> world, tensor, data;
  int rank = 0, size = 1, local_rank = 0;
  std::string gpu;  // train.device = cuda: the GPU this rank uses, e.g. "cuda:1 (NVIDIA H200)"
  bool root() const { return rank == 0; }
};

// True when this process was started by an MPI launcher (mpirun, srun with PMI/PMIx).
bool launched_by_mpi();
// The world rank and size from the launcher's environment, before MPI is initialized (0 and 1
// when none).
int launcher_rank();
int launcher_size();

// For translate and score --checkpoint: MPI's world when launched by an MPI launcher (null when not),
// the collectives' watchdog set first to `timeout_s` (their --timeout), as make_process_grid sets it to
// parallel.timeout_s.
std::unique_ptr<dist::MpiCommunicator> mpi_world_for_decoding(double timeout_s);

// Runs `load` on rank 0 of `world` first, then on the other ranks, and returns when every rank has
// (world null: just runs it): what rank 0 reads or makes (a checkpoint, a corpus, a trained
// vocabulary) fails once, there, and is there for the others. The others wait without the
// collective timeout (rank 0 may train a vocabulary for minutes). Any error rank 0 meets ends the
// job from it (MPI_Abort), even one every rank would meet alike, since the others are waiting.
void root_first(dist::Communicator* world, const std::function<void()>& load);

// Uses MPI when launched by mpirun or when parallel.tensor x parallel.data > 1; otherwise a
// single process without MPI. Throws (on every rank alike) when tensor x data is not the number
// of processes. With train.device = cuda each rank takes GPU local_rank % (GPUs it sees), no two ranks
// may share a physical GPU, and the groups
// carry CUDA tensors over NCCL (CPU tensors still over MPI). Under MPI, first of all, every rank
// must have the same effective config and `command_line` (the rest of what it was started with,
// e.g. train's --resume), else every rank throws one EveryRankError.
ProcessGrid make_process_grid(const io::RunConfig& cfg, std::string_view command_line = {});

}  // namespace tessera::launch
