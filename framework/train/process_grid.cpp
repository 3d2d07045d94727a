#include "train/process_grid.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/fault_injection.h"
#include "common/hash.h"
#include "dist/launcher.h"
#include "dist/local_communicator.h"
#include "dist/mpi_communicator.h"
#include "dist/peer_probe.h"
#include "tensor/allocator.h"
#ifdef TESSERA_WITH_CUDA
#include "dist/device_communicator.h"
#endif

namespace tessera::train {

using dist::launched_by_mpi;
using dist::launcher_rank;

namespace {

// NCCL needs one GPU per rank: every rank learns every rank's GPU UUID and all fail alike (the
// error printed once), naming two ranks that share one.
void check_one_gpu_per_rank(dist::Communicator& world, const CudaDevice& device) {
  if (const auto shared = dist::ranks_sharing_a_gpu(world, device.uuid))
    throw EveryRankError(fmt::format(
        "train.device = cuda: ranks {} and {} would share one GPU (each rank needs its own: start at most as "
        "many processes per machine as it has GPUs, or give each rank a GPU of its own with "
        "CUDA_VISIBLE_DEVICES)",
        shared->first, shared->second));
}

// For the failure tests (common/fault_injection.h): "mpi" before MPI starts, "local" before the
// ranks on each machine are counted (local_rank), "nccl" before the NCCL bootstrap (train.device =
// cuda), "split" before the tensor- and data-parallel groups are made.
void hang_if_injected_at(std::string_view stage) {
  if (fault::injected("SETUP_HANG", launcher_rank(), stage)) fault::hang();
}

}  // namespace

ProcessGrid make_process_grid(const io::RunConfig& cfg, std::string_view command_line) {
  const auto tp = static_cast<int>(cfg.parallel.tensor);  // at most 4096
  const auto dp = static_cast<int>(cfg.parallel.data);    // at most 1000000
  const std::int64_t processes = std::int64_t{tp} * dp;   // beyond int's range
  const bool gpu = cfg.train.device == Device::cuda;
  ProcessGrid g;
  const bool by_mpirun = launched_by_mpi();  // asked first: MPI_Init sets those variables in a lone process too
  if (!by_mpirun && processes == 1) {
    g.world = std::make_unique<dist::LocalCommunicator>();
    g.tensor = std::make_unique<dist::LocalCommunicator>();
    g.data = std::make_unique<dist::LocalCommunicator>();
    if (gpu) g.gpu = select_cuda_device(0).description;
    return g;
  }
  // The watchdog first: starting MPI waits for every rank, as a collective does.
  dist::set_collective_timeout(cfg.parallel.timeout_s, "parallel.timeout_s", launcher_rank());
  hang_if_injected_at("mpi");
  std::unique_ptr<dist::Communicator> world = dist::MpiCommunicator::world();
  g.rank = world->rank();
  g.size = world->size();
  // Each rank reads its own config file and command line: node-local copies of "the same" file,
  // or an MPMD launch. Another parallel layout, seed, batch size or step count on one rank would
  // make other collectives (heap corruption, a hang) or train replicas apart in silence.
  dist::check_same_on_every_rank(
      hash_combine(hash_combine(0, cfg.to_yaml(false)), command_line), world.get(),
      "the effective config (the config file with its --set overrides, and --resume)",
      "were given another one than rank 0 (config files that differ between machines?): give "
      "every rank the same config file and command line");
  hang_if_injected_at("local");
  g.local_rank = world->mpi()->local_rank();
  g.local_size = world->mpi()->local_size();
  if (processes != g.size)
    throw io::ConfigError(
        fmt::format("{}: parallel.tensor ({}) x parallel.data ({}) = {} processes, but this run has {} ({})",
                    cfg.where({"parallel.tensor", "parallel.data"}), tp, dp, processes, g.size,
                    by_mpirun ? fmt::format("mpirun -np {}", g.size)
                              : fmt::format("not started by mpirun: use mpirun -np {}", processes)));
  if (gpu) {
    const CudaDevice device = select_cuda_device(g.local_rank);
    g.gpu = device.description;
    check_one_gpu_per_rank(*world, device);
#ifdef TESSERA_WITH_CUDA
    hang_if_injected_at("nccl");
    // Collective: every rank has selected its GPU above (or thrown there, as all would).
    world = std::make_unique<dist::DeviceCommunicator>(
        std::unique_ptr<dist::MpiCommunicator>(static_cast<dist::MpiCommunicator*>(world.release())));
#endif
  }
  g.hosts = dist::gather_hosts(*world, g.local_rank);
  dist::start_peer_probe(*world, g.hosts);  // so that a timeout names the ranks that are gone
  if (const std::string spanning = dist::tensor_groups_spanning_hosts(g.hosts, tp); !spanning.empty() && g.root())
    fmt::print(stderr, "tessera: warning: {}\n", spanning);
  hang_if_injected_at("split");
  g.tensor = world->split(/*color=*/g.rank / tp, /*key=*/g.rank);
  g.data = world->split(/*color=*/g.rank % tp, /*key=*/g.rank);
  g.world = std::move(world);
  return g;
}

}  // namespace tessera::train
