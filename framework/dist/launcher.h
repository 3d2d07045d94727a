// What an MPI launcher (mpirun, srun) tells a process, and the helpers that keep the ranks of a job
// in step: one rank loading first, and every rank checked to hold what rank 0 holds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/mpi_communicator.h"

namespace tessera::dist {

// True when this process was started by an MPI launcher (mpirun, srun with PMI/PMIx).
bool launched_by_mpi();
// The world rank and size from the launcher's environment, before MPI is initialized (0 and 1
// when none).
int launcher_rank();
int launcher_size();

// For translate and score --checkpoint: MPI's world when launched by an MPI launcher (null when not),
// the collectives' watchdog set first to `timeout_s` (their --timeout), as make_process_grid sets it to
// parallel.timeout_s.
std::unique_ptr<MpiCommunicator> mpi_world_for_decoding(double timeout_s);

// Runs `load` on rank 0 of `world` first, then on the other ranks, and returns when every rank has
// (world null: just runs it): what rank 0 reads or makes (a checkpoint, a corpus, a trained
// vocabulary) fails once, there, and is there for the others. The others wait without the
// collective timeout (rank 0 may train a vocabulary for minutes). Any error rank 0 meets ends the
// job from it (MPI_Abort), even one every rank would meet alike, since the others are waiting.
void root_first(Communicator* world, const std::function<void()>& load);

// What every rank reads or is given for itself (node-local copies of "the same" file may differ,
// and so may an MPMD launch's command lines): a rank whose `fingerprint` of `what` is not rank 0's
// stops every rank with one message, "WHAT differs between the ranks: N of M ranks HOW", rather
// than each rank going on with other data (other ids, other sentence counts in an exchange).
void check_same_on_every_rank(std::uint64_t fingerprint, Communicator* world, const std::string& what,
                              const std::string& how =
                                  "read other contents than rank 0 (files that differ between "
                                  "machines?): give every rank the same files");

}  // namespace tessera::dist
