#include "launch/process_grid.h"

#include <cstdlib>

#include "dist/local_communicator.h"
#include "dist/mpi_communicator.h"

namespace tessera::launch {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

int launcher_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 1;
}

ProcessGrid make_process_grid(const io::Config& cfg) {
  const auto tp = static_cast<int>(cfg.integer("parallel.tensor"));
  const auto dp = static_cast<int>(cfg.integer("parallel.data"));
  ProcessGrid g;
  if (!launched_by_mpi() && tp * dp == 1) {
    g.world = std::make_unique<dist::LocalCommunicator>();
    g.tensor = std::make_unique<dist::LocalCommunicator>();
    g.data = std::make_unique<dist::LocalCommunicator>();
    return g;
  }
  auto world = dist::MpiCommunicator::world();
  dist::set_collective_timeout(cfg.real("parallel.timeout_s"));
  g.rank = world->rank();
  g.size = world->size();
  g.local_rank = world->local_rank();
  if (tp * dp != g.size)
    throw io::ConfigError(
        fmt::format("parallel.tensor ({}) x parallel.data ({}) = {} processes, but this run has {} (mpirun -np {})", tp,
                    dp, tp * dp, g.size, g.size));
  g.tensor = world->split(/*color=*/g.rank / tp, /*key=*/g.rank);
  g.data = world->split(/*color=*/g.rank % tp, /*key=*/g.rank);
  g.world = std::move(world);
  return g;
}

}  // namespace tessera::launch
