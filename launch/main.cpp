// The `tessera` executable: one binary, one subcommand per job.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <exception>

#include "launch/bench_kernels.h"
#include "launch/demo_train.h"
#include "tensor/allocator.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  using namespace tessera::launch;
  CLI::App app{"Tessera: distributed training of the Transformer (Vaswani et al. 2017) on GPUs and CPUs"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION +
                                        (tessera::cuda_available() ? " (CUDA: GPU found)" : " (CPU)"));
  app.require_subcommand(1);

  DemoOptions demo;
  CLI::App* train = app.add_subcommand(
      "train", "Train a model. Until the Transformer lands: a small MLP demo on a synthetic task (no data, no GPU)");
  train->add_option("--steps", demo.steps, "Training steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  train->add_option("--hidden", demo.hidden, "Hidden units")->check(CLI::Range(2, 65536))->capture_default_str();
  train->add_option("--batch", demo.batch, "Points per batch")->check(CLI::Range(1, 1000000))->capture_default_str();
  train->add_option("--lr", demo.lr, "Adam learning rate")->check(CLI::Range(1e-8, 10.0))->capture_default_str();
  train->add_option("--seed", demo.seed, "Random seed")->capture_default_str();

  BenchOptions bench;
  CLI::App* bench_cmd =
      app.add_subcommand("bench", "Benchmarks that print figures next to a reference measured in the same run");
  CLI::App* bench_kernels =
      bench_cmd->add_subcommand("kernels", "CPU GEMM, attention and layer norm vs. sgemm and copy bandwidth");
  bench_kernels->add_option("--repeats", bench.repeats, "Timed runs per kernel (best is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench_cmd->require_subcommand(1);

  CLI11_PARSE(app, argc, argv);
  try {
    if (train->parsed()) return run_demo_training(demo);
    if (bench_kernels->parsed()) return run_kernel_bench(bench);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tessera: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
