#include "dist/launcher.h"

#include <fmt/core.h>

#include <cstdlib>

#include "common/error.h"

namespace tessera::dist {

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

void root_first(dist::Communicator* world, const std::function<void()>& load) {
  if (world == nullptr || world->size() == 1) {
    load();
    return;
  }
  const dist::UntimedCollectives waiting_for_rank_0;
  const auto load_or_abort = [&] {
    try {
      load();
    } catch (const EveryRankError& e) {
      throw Error(e.what());  // others wait in a barrier below: only the job's abort ends them
    }
  };
  if (world->rank() == 0) load_or_abort();
  world->barrier();
  if (world->rank() != 0) load_or_abort();
  world->barrier();  // rank 0 waits for the others' loading without the timeout, too
}

std::unique_ptr<dist::MpiCommunicator> mpi_world_for_decoding(double timeout_s) {
  if (!launched_by_mpi()) return nullptr;
  dist::set_collective_timeout(timeout_s, "--timeout", launcher_rank());  // before MPI's start, which waits too
  return dist::MpiCommunicator::world();
}

void check_same_on_every_rank(std::uint64_t fingerprint, dist::Communicator* world, const std::string& what,
                              const std::string& how) {
  if (world == nullptr || world->size() < 2) return;
  const std::uint64_t first = dist::broadcast_u64(fingerprint, world);
  if (const std::int32_t other = dist::count_ranks(fingerprint != first, world); other > 0)
    throw EveryRankError(
        fmt::format("{} differs between the ranks: {} of {} ranks {}", what, other, world->size(), how));
}

}  // namespace tessera::dist
