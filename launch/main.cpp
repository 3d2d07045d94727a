// The `tessera` executable: one binary, one subcommand per job.
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include "common/error.h"
#include "common/hash.h"
#include "dist/launcher.h"
#include "dist/mpi_communicator.h"
#include "io/config.h"
#include "kernels/cpu/blas_core.h"
#include "launch/command_line.h"
#include "launch/commands.h"
#include "tensor/allocator.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace {

// What --version says of CUDA: whether this build has it, and whether a GPU answers.
std::string build_and_gpu() {
#ifdef TESSERA_WITH_CUDA
  return tessera::cuda_available() ? "CUDA build: GPU found"
                                   : "CUDA build: no GPU answers: " + tessera::cuda_unavailable_reason();
#else
  return "CPU-only build";
#endif
}

// An error every rank should meet alike (a bad config, a non-finite gradient norm): rank 0 prints
// it and every rank exits 1. Under mpirun a rank cannot know that the others met it too: a config
// file missing on one machine, an MPMD command line or a run folder not shared fail one rank
// alone. So it waits a few seconds for every rank to fail; when some do not, it prints the error
// with its rank and ends the job, so that no rank waits for it in vain and no error goes unsaid.
// A rank whose message differs from rank 0's prints its own too.
int exit_on_every_rank_error(const std::string& what, bool rank_0_alone) {
  using namespace tessera::launch;
  using tessera::dist::launched_by_mpi;
  using tessera::dist::launcher_rank;
  const int rank = launcher_rank();
  if (rank == 0) tessera::print_to_stderr("tessera: error: {}\n", what);
  std::fflush(stderr);
  // Not launcher_size() < 2: under srun with PMIx no variable says the size before MPI starts.
  if (rank_0_alone || !launched_by_mpi()) return 1;
  const auto say_own = [rank, what] {
    if (rank != 0) tessera::print_to_stderr("tessera: error on rank {}: {}\n", rank, what);
    std::fflush(stderr);
  };
  // MPI_Init (this rank failed before it) waits for every rank, also those that have exited (a
  // command only rank 0 runs): bounded all the same.
  static std::atomic<bool> decided{false};
  const double timeout = tessera::dist::collective_timeout();
  // At least 2 s: ranks that all failed alike still unwind (free memory, abort NCCL) at their own pace.
  const double window = timeout > 0 ? std::clamp(timeout / 2, 2.0, 10.0) : 10.0;
  try {
    std::thread([say_own, window] {
      std::this_thread::sleep_for(std::chrono::duration<double>(window + 30.0));
      if (decided.exchange(true)) return;
      say_own();
      std::_Exit(1);
    }).detach();
  } catch (const std::system_error&) {  // no thread to spare (a process limit): end the job now instead
    say_own();
    if (tessera::dist::mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  const tessera::dist::ErrorAgreement agreed = tessera::dist::agree_on_error(tessera::hash_combine(0, what), window);
  if (decided.exchange(true))
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the thread above is ending the process
  if (agreed.every_rank) {
    if (!agreed.same_as_rank_0) say_own();
    return 1;
  }
  say_own();
  if (tessera::dist::mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;  // MPI did not start: this exit status makes the launcher end the job
}

int run_tessera(int argc, char** argv) {
  using namespace tessera::launch;
  using tessera::dist::launched_by_mpi;
  using tessera::dist::launcher_rank;
  // Before anything else: a rerun starts over.
  tessera::cpu::rerun_with_faster_blas_core(argv);
  // Line by line even into a file (a cluster job's log): what a run printed before it was killed,
  // during minutes of data preparation say, is there.
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  // A file-size limit (ulimit -f) makes a write fail (EFBIG) instead of killing the process with
  // SIGXFSZ: the error paths then name the file and remove the temporary, as on a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"Tessera: distributed training of the Transformer (Vaswani et al. 2017) on GPUs and CPUs"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION + " (" + build_and_gpu() + "; " +
                                        tessera::cpu::blas_description() + ")");
  app.require_subcommand(1);
  const std::vector<Command> commands = {add_train_command(app), add_translate_command(app), add_score_command(app),
                                         add_vocab_command(app), add_average_command(app),   add_bench_command(app),
                                         add_plan_command(app)};
  if (const auto mistake = check_command_line(app, argc, argv)) {
    tessera::print_to_stderr("{}\n", mistake->message);
    return static_cast<int>(mistake->exit_code);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Under mpirun every rank is given the same command line: one prints the help or the version.
    // An error is printed by each (an MPMD launch may give only some ranks a bad one).
    if (e.get_exit_code() != 0 || launcher_rank() == 0) return app.exit(e);
    std::ostringstream quiet;
    return app.exit(e, quiet, quiet);
  }
  const Command* running = nullptr;
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) {
        running = &c;
        return c.one_process && launcher_rank() != 0 ? 0 : c.run();
      }
  } catch (const tessera::EveryRankError& e) {
    std::fflush(stdout);  // what was logged comes before the error
    return exit_on_every_rank_error(e.what(), running != nullptr && running->one_process);
  } catch (const std::exception& e) {
    std::fflush(stdout);  // what was logged comes before the error, also when both go to one pipe
    // fmt::print's own message for a failed write says "cannot write to file": name the file.
    const auto* system = dynamic_cast<const std::system_error*>(&e);
    const std::string what =
        system != nullptr && std::ferror(stdout) != 0 && std::string_view(e.what()).starts_with("cannot write to file")
            ? fmt::format("writing to standard output failed: {}", system->code().message())
            : std::string(e.what());
    if (launched_by_mpi() && tessera::dist::mpi_initialized()) {
      // Only this rank may know: print, then take the whole job down so no rank waits forever.
      tessera::print_to_stderr("tessera: error on rank {}: {}\n", launcher_rank(), what);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    tessera::print_to_stderr("tessera: error: {}\n", what);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int status = run_tessera(argc, argv);
  // A write to standard output that failed without an exception (CLI11's --help and --version go
  // through std::cout, which writes through stdout's buffer; `tessera --version > /dev/full`):
  // what the user asked for is lost.
  if (status == 0) {
    const bool flushed = std::fflush(stdout) == 0;  // the cause is known when this write fails
    if (!flushed || std::ferror(stdout) != 0) {
      tessera::print_to_stderr("tessera: error: writing to standard output failed{}\n",
                               flushed ? "" : fmt::format(": {}", std::strerror(errno)));
      return 1;
    }
  }
  return status;
}
