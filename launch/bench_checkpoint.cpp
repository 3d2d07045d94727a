// `tessera bench checkpoint`: save and load time of a model with its Adam state, next to the
// disk's sequential write and read rates measured with dd in the same run, on the same folder.
#include "launch/bench_checkpoint.h"

#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "io/checkpoint.h"
#include "launch/schema.h"
#include "models/transformer.h"

namespace tessera::launch {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs a shell command and returns its wall time; throws when it fails.
double timed_system(const std::string& command) {
  const auto t0 = Clock::now();
  const int rc = std::system(command.c_str());
  const double s = seconds_since(t0);
  TESSERA_CHECK(rc == 0, "bench checkpoint: '{}' failed (status {})", command, rc);
  return s;
}

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
  const io::Config cfg = io::Config::load(tessera_schema(), opt.config, {});
  // The folder first: a model of the base size takes seconds to build.
  std::error_code ec;
  fs::create_directories(opt.dir, ec);
  if (ec) fail("bench checkpoint: cannot create --dir '{}': {}", opt.dir, ec.message());
  const models::Transformer model(model_config(cfg, opt.vocab, opt.vocab), 1);
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
  const std::string path = (fs::path(opt.dir) / "bench_checkpoint.h5").string();
  const std::string dd_file = (fs::path(opt.dir) / "bench_dd.bin").string();
  const auto mib = static_cast<long>(bytes / (1 << 20)) + 1;
  fmt::print("model: {} ({} parameters, vocabulary {}); checkpoint with Adam state: {:.1f} MB in {}\n", opt.config,
             model.num_parameters(), opt.vocab, bytes / 1e6, opt.dir);

  bool cold = false;
  double best_dd_write = 1e30, best_dd_read = 1e30, best_save = 1e30, best_load = 1e30;
  for (int r = 0; r < opt.repeats; ++r) {
    // dd: the same amount of data, 1 MiB blocks, flushed to disk before it reports (conv=fsync).
    best_dd_write = std::min(
        best_dd_write,
        timed_system(fmt::format("dd if=/dev/zero of='{}' bs=1M count={} conv=fsync status=none", dd_file, mib)));
    cold = drop_page_cache();
    best_dd_read =
        std::min(best_dd_read, timed_system(fmt::format("dd if='{}' of=/dev/null bs=1M status=none", dd_file)));
    fs::remove(dd_file);
    auto t0 = Clock::now();
    io::save_checkpoint(path, c);
    best_save = std::min(best_save, seconds_since(t0));
    cold = drop_page_cache() && cold;
    t0 = Clock::now();
    const io::Checkpoint back = io::load_checkpoint(path);
    best_load = std::min(best_load, seconds_since(t0));
    TESSERA_CHECK(back.exp_avg_sq.size() == c.exp_avg_sq.size(), "bench checkpoint: incomplete load");
  }
  fs::remove(path);
  const double gb = bytes / 1e9;
  fmt::print("dd write (conv=fsync)   {:7.3f} s  {:6.2f} GB/s\n", best_dd_write, gb / best_dd_write);
  fmt::print("checkpoint save         {:7.3f} s  {:6.2f} GB/s  = {:5.1f}% of dd write\n", best_save, gb / best_save,
             100 * best_dd_write / best_save);
  fmt::print("dd read                 {:7.3f} s  {:6.2f} GB/s\n", best_dd_read, gb / best_dd_read);
  fmt::print(
      "checkpoint load         {:7.3f} s  {:6.2f} GB/s  = {:5.1f}% of dd read ({})\n", best_load, gb / best_load,
      100 * best_dd_read / best_load,
      cold ? "both from the disk: page cache dropped before each" : "both from the page cache: dropping it needs root");
  fmt::print("(best of {} runs each)\n", opt.repeats);
  return 0;
}

}  // namespace tessera::launch
