// `tessera bench checkpoint`: save and load time of a model with its Adam state, next to the
// disk's sequential write and read rates measured with dd in the same run, on the same folder.
#include "launch/bench_checkpoint.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/run_config.h"
#include "models/from_config.h"
#include "models/transformer.h"

namespace tessera::launch {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs a program (no shell: --dir may hold any character) and returns its wall time; throws when
// it fails.
double timed_run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto t0 = Clock::now();
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (spawned != 0) fail("bench checkpoint: cannot run '{}': {}", argv[0], std::strerror(spawned));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const double s = seconds_since(t0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("bench checkpoint: '{}' failed ({})", fmt::join(argv, " "),
         WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                           : fmt::format("signal {}", WTERMSIG(status)));
  return s;
}

// The bench's files, removed however it ends (a failed write, on a full disk say, left a file of
// the checkpoint's size in --dir).
struct BenchFiles {
  std::string checkpoint, dd;
  ~BenchFiles() {
    std::error_code ec;
    std::filesystem::remove(checkpoint, ec);
    std::filesystem::remove(checkpoint + ".tmp", ec);
    std::filesystem::remove(dd, ec);
  }
};

// Empties the page cache (needs root), so reads come from the disk; false when not allowed.
bool drop_page_cache() {
  ::sync();
  std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("1\n", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int run_checkpoint_bench(const CheckpointBenchOptions& opt) {
  namespace fs = std::filesystem;
  const io::RunConfig cfg = io::RunConfig::load(opt.config, {});
  // The model's own constraints (heads dividing d_model, ...) before anything is made; then the
  // folder: a model of the base size takes seconds to build.
  models::validate(models::model_config(cfg, opt.vocab, opt.vocab), 1);
  std::error_code ec;
  fs::create_directories(opt.dir, ec);
  if (ec) fail("bench checkpoint: cannot create --dir '{}': {}", opt.dir, ec.message());
  const models::Transformer model(models::model_config(cfg, opt.vocab, opt.vocab), 1);
  io::Checkpoint c;
  c.step = 1000;
  c.config_yaml = cfg.to_yaml(false);
  c.model = io::named_values(model.parameters());
  // Adam moments of the model's shapes; their values do not change the cost.
  for (const auto& [name, t] : c.model) {
    c.exp_avg.emplace(name, t.to(DType::f64).to(DType::f32));
    c.exp_avg_sq.emplace(name, t.to(DType::f64).to(DType::f32));
  }
  c.state = io::TrainingState{.step = 1000};
  double bytes = 0;
  for (const auto& [name, t] : c.model) bytes += 3.0 * static_cast<double>(t.numel()) * sizeof(float);
  // Names of this process's own: files of the user's, or of a bench running alongside, stay.
  const BenchFiles files{(fs::path(opt.dir) / fmt::format("bench_checkpoint.{}.h5", ::getpid())).string(),
                         (fs::path(opt.dir) / fmt::format("bench_dd.{}.bin", ::getpid())).string()};
  const std::string& path = files.checkpoint;
  const std::string& dd_file = files.dd;
  const auto mib = static_cast<long>(bytes / (1 << 20)) + 1;
  fmt::print("model: {} ({} parameters, vocabulary {}); checkpoint with Adam state: {:.1f} MB in {}\n", opt.config,
             model.num_parameters(), opt.vocab, bytes / 1e6, opt.dir);

  bool cold = false;
  double best_dd_write = 1e30, best_dd_read = 1e30, best_save = 1e30, best_load = 1e30;
  for (int r = 0; r < opt.repeats; ++r) {
    // dd: the same amount of data rounded up to whole MiB blocks, flushed to disk before it reports
    // (conv=fsync).
    best_dd_write = std::min(best_dd_write, timed_run({"dd", "if=/dev/zero", "of=" + dd_file, "bs=1M",
                                                       fmt::format("count={}", mib), "conv=fsync", "status=none"}));
    cold = drop_page_cache();
    best_dd_read = std::min(best_dd_read, timed_run({"dd", "if=" + dd_file, "of=/dev/null", "bs=1M", "status=none"}));
    fs::remove(dd_file);  // before the save: both need the space
    auto t0 = Clock::now();
    io::save_checkpoint(path, c);
    best_save = std::min(best_save, seconds_since(t0));
    cold = drop_page_cache() && cold;
    t0 = Clock::now();
    const io::Checkpoint back = io::load_checkpoint(path);
    best_load = std::min(best_load, seconds_since(t0));
    TESSERA_CHECK(back.exp_avg_sq.size() == c.exp_avg_sq.size(), "bench checkpoint: incomplete load");
  }
  // Rates against rates: dd moves whole MiB, up to 1 MiB more than the checkpoint holds.
  const double gb = bytes / 1e9, dd_gb = static_cast<double>(mib) * (1 << 20) / 1e9;
  const double dd_write = dd_gb / best_dd_write, dd_read = dd_gb / best_dd_read;
  fmt::print("dd write (conv=fsync)   {:7.3f} s  {:6.2f} GB/s\n", best_dd_write, dd_write);
  fmt::print("checkpoint save         {:7.3f} s  {:6.2f} GB/s  = {:5.1f}% of dd write\n", best_save, gb / best_save,
             100 * (gb / best_save) / dd_write);
  fmt::print("dd read                 {:7.3f} s  {:6.2f} GB/s\n", best_dd_read, dd_read);
  fmt::print(
      "checkpoint load         {:7.3f} s  {:6.2f} GB/s  = {:5.1f}% of dd read ({})\n", best_load, gb / best_load,
      100 * (gb / best_load) / dd_read,
      cold ? "both from the disk: page cache dropped before each" : "both from the page cache: dropping it needs root");
  fmt::print("(best of {} runs each)\n", opt.repeats);
  return 0;
}

}  // namespace tessera::launch
