#include "train/trainer.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <regex>

#include "common/hash.h"
#include "data/task_data.h"
#include "dist/hosts.h"
#include "dist/launcher.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/dispatch.h"
#include "models/from_config.h"
#include "plan/preflight.h"
#include "train/process_grid.h"
#include "train/run.h"
#include "train/run_folder.h"
#include "train/stop_signals.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

// train.precision bf16 on the CPU: bfloat16 GEMMs, refused on a CPU where oneDNN would emulate
// them (slower than float32). Each rank checks its own CPU, so the error names its host.
void set_cpu_matmul_precision(const io::RunConfig& cfg) {
  const bool bf16 = cfg.train.device == Device::cpu && cfg.train.precision == io::Precision::bf16;
  if (bf16 && !cpu::bf16_matmul_native())
    fail(
        "train.precision = bf16 on the CPU needs AMX or AVX512-BF16, which the CPU of host {} lacks (oneDNN "
        "would run its '{}' kernel, slower than float32): use train.precision: fp32",
        dist::this_host(), cpu::bf16_matmul_kernel());
  kernels::set_cpu_bf16_matmul(bf16);
}

// Everything about the config that can fail is checked before any work, on every rank alike.
void check_before_any_work(const io::RunConfig& cfg, const ProcessGrid& grid) {
  // The model's own constraints (heads divide d_model and the tensor-parallel size, ...).
  try {
    models::validate(models::training_model_config(cfg, 1000, 1000), static_cast<int>(cfg.parallel.tensor));
  } catch (const Error& e) {
    throw io::ConfigError(e.what());  // the same on every rank: printed once
  }
  io::check_key_combinations(cfg);
  kernels::set_allow_tf32(cfg.train.tf32);
  set_cpu_matmul_precision(cfg);
  // Rank 0 alone logs; the others' standard output is dropped (their errors still reach stderr).
  if (!grid.root() && std::freopen("/dev/null", "w", stdout) == nullptr) fail("cannot silence rank {}", grid.rank);
  const fs::path dir(cfg.output.dir);
  // A name that cannot be looked up (too long, a loop of links, a file where a folder should be on
  // the way) is named with its key, not as a bare filesystem error from the first use below.
  if (std::error_code ec; !fs::exists(fs::status(dir, ec)) && ec && ec != std::errc::no_such_file_or_directory)
    throw io::ConfigError(
        fmt::format("{}: output.dir = '{}': {}", cfg.where({"output.dir"}), dir.string(), ec.message()));
  data::check_data_files(cfg);  // before the folder is made or the config printed
}

// The predicted peak memory per rank against what the tightest rank can use (every rank decides
// alike), before minutes of vocabulary training and encoding end in the kernel's OOM killer.
void check_memory_fits(const io::RunConfig& cfg, const ProcessGrid& grid) {
  if (!cfg.train.memory_check) return;
  plan::MemoryBudget budget = plan::rank_memory_budget(cfg.train.device == Device::cuda, grid.local_size);
  Tensor budgets = Tensor::zeros({grid.size}, DType::f64);
  budgets.data<double>()[grid.rank] = budget.bytes;
  if (grid.size > 1) grid.world->all_reduce(budgets, dist::ReduceOp::sum);
  const std::vector<double> all = budgets.to_doubles();
  const auto tightest = static_cast<int>(std::min_element(all.begin(), all.end()) - all.begin());
  if (tightest != grid.rank) budget = {all[static_cast<std::size_t>(tightest)], fmt::format("on rank {}", tightest)};
  const plan::MemoryCheck check = plan::check_memory(cfg, budget);
  if (check.verdict == plan::Verdict::over)
    throw EveryRankError("train: out of memory before the first step: " + check.message);
  if (check.verdict == plan::Verdict::near) fmt::print("train: warning: {}\n", check.message);
}

// --resume alone: the latest checkpoint_<step>.h5 of `dir` (into `saved`, all of them), or "" to
// start from scratch; refused where the folder holds a finished run or a best checkpoint only.
std::string latest_checkpoint(const fs::path& dir, dist::Communicator* world, StepCheckpoints& saved) {
  saved = step_checkpoints(dir);
  const std::string resume_path = saved.empty() ? std::string() : saved.back().second.string();
  const std::string refusal = saved.empty() ? resume_refusal(dir) : std::string();
  // Each rank lists output.dir for itself: ranks that see other folders (not one shared folder)
  // would go on from other checkpoints, or some from scratch, or refuse alone, and never line up:
  // compared before any of that. (A path given is already the same on every rank:
  // make_process_grid compared the command lines.)
  dist::check_same_on_every_rank(
      hash_combine(hash_combine(0, resume_path), refusal), world,
      fmt::format("the checkpoint --resume continues from ({} on rank 0)",
                  !resume_path.empty()                     ? fmt::format("'{}'", resume_path)
                  : refusal.empty()                        ? std::string("none: starting from scratch")
                  : fs::exists(dir / "checkpoint_best.h5") ? std::string("none, but a checkpoint_best.h5")
                                                           : std::string("none, but a model.h5")),
      fmt::format("found another in output.dir '{}' (or none): the run folder must be one folder that every rank "
                  "sees (a shared file system)",
                  dir.string()));
  if (!refusal.empty()) throw io::ConfigError(refusal);
  if (resume_path.empty())
    fmt::print("train: --resume: no checkpoint_<step>.h5 in {}; starting from scratch\n", dir.string());
  return resume_path;
}

// Rank 0 makes output.dir (its own mkdir: a folder another start made meanwhile is theirs), locks
// it, prints the effective config and removes the temporaries of a crash mid-save.
void prepare_output_dir(const io::RunConfig& cfg, std::optional<RunFolderLock>& folder_lock,
                        StartLeftovers& leftovers) {
  const fs::path dir(cfg.output.dir);
  // The checks' error codes are their own: is_symlink leaves ENOENT in its code for a folder
  // that does not exist yet, which is no error here.
  std::error_code ignored;
  if (fs::exists(dir, ignored) && !fs::is_directory(dir, ignored))
    fail("output.dir '{}' is a file, not a folder", dir.string());
  if (fs::is_symlink(dir, ignored) && !fs::exists(dir, ignored))  // scratch space not mounted, say
    fail("output.dir '{}' is a symbolic link to '{}', which does not exist", dir.string(),
         fs::read_symlink(dir, ignored).string());
  std::error_code ec;
  // "run/" and "run/." name the folder run: its parents are what may need making first, not run
  // itself (else this start's mkdir found it made, and a refused start left it behind).
  fs::path folder = dir;
  while ((!folder.has_filename() || folder.filename() == ".") && folder.has_relative_path() && folder.has_parent_path())
    folder = folder.parent_path();
  if (folder.has_parent_path()) fs::create_directories(folder.parent_path(), ec);
  const bool made = !ec && fs::create_directory(folder, ec);
  if (ec) fail("cannot create output.dir '{}': {}", dir.string(), ec.message());
  if (made) leftovers.created_folder(folder);
  if (!folder_lock) folder_lock.emplace(dir);
  fmt::print("config (effective):\n{}", cfg.to_yaml(false));
  // A crash mid-save leaves "<name>.tmp" behind: never a valid checkpoint, so it goes (with the
  // folder locked: not a running train's save). Only the names a train saves: another tool's file
  // in progress here (`tessera average -o RUN/avg.h5`, say) is not ours to remove.
  static const std::regex train_temporary(R"((checkpoint_(\d+|best)|model)\.h5\.tmp)");
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (std::regex_match(entry.path().filename().string(), train_temporary)) fs::remove(entry.path(), ec);
}

}  // namespace

TrainResult run_training(const io::RunConfig& cfg, const TrainOptions& options) {
  ProcessGrid grid =
      make_process_grid(cfg, fmt::format("--resume {} {}", options.resume ? "on" : "off", options.resume_path));
  check_before_any_work(cfg, grid);
  check_memory_fits(cfg, grid);
  const fs::path dir(cfg.output.dir);
  // One train per folder, locked before the folder is looked at: a train that ended in between would
  // be taken for none (and trained over), or resumed from an older checkpoint. A new folder is
  // locked once created, below.
  std::optional<RunFolderLock> folder_lock;  // rank 0's, until the run ends
  StartLeftovers leftovers(folder_lock);     // destroyed before the lock, after the run's files below
  if (grid.root() && fs::is_directory(dir)) folder_lock.emplace(dir);
  if (!options.resume) check_no_earlier_run(dir, grid.world.get());
  StepCheckpoints saved;  // with --resume alone: the folder's step checkpoints
  std::string resume_path = options.resume_path;
  if (options.resume && resume_path.empty()) resume_path = latest_checkpoint(dir, grid.world.get(), saved);
  // Before the folder is created or the config printed: a refused resume leaves no trace.
  if (!resume_path.empty()) {
    dist::root_first(grid.world.get(), [&] {
      try {
        io::read_checkpoint_header(resume_path);
      } catch (const io::DamagedCheckpoint& e) {
        rethrow_naming_earlier_checkpoint(e, saved);
      }
      check_resumable(cfg, resume_path);
    });
  }
  if (grid.root()) prepare_output_dir(cfg, folder_lock, leftovers);
  check_shared_run_folder(dir, grid.world.get(), grid.hosts);
  StopSignals signals;
  if (grid.root()) leftovers.note_new_vocabularies(cfg);
  // Every rank at once: the data loading is collective (rank 0 reads and trains the vocabulary
  // first, then all encode a share of the corpus).
  auto run = std::make_unique<Run>(cfg, grid, resume_path);
  if (!resume_path.empty()) {
    try {
      run->resume(resume_path);
    } catch (const io::DamagedCheckpoint& e) {  // its header read above, but a dataset does not
      rethrow_naming_earlier_checkpoint(e, saved);
    }
  }
  // Only now, with the data and any checkpoint accepted: a run refused on the way leaves the
  // folder's config.yaml (that of the run it holds) as it was, and no vocabulary of its own.
  leftovers.keep();
  if (grid.root()) write_effective_config(cfg, dir);
  TrainResult result = run->train();
  grid.world->barrier();  // every rank returns once rank 0 has written the final files
  return result;
}

}  // namespace tessera::train
