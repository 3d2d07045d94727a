#include "launch/bench_checkpoint.h"
#include "launch/bench_kernels.h"
#include "launch/commands.h"

namespace tessera::launch {

Command add_bench_command(CLI::App& parent) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* bench =
      parent.add_subcommand("bench", "Benchmarks that print figures next to a reference measured in the same run");
  CLI::App* kernels =
      bench->add_subcommand("kernels", "CPU GEMM, attention and layer norm vs. sgemm and copy bandwidth");
  kernels->add_option("--repeats", opt->repeats, "Timed runs per kernel (best is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  auto ckpt = std::make_shared<CheckpointBenchOptions>();
  CLI::App* checkpoint = bench->add_subcommand(
      "checkpoint", "Save and load time of a model with its Adam state vs. dd's write and read rates");
  checkpoint->add_option("--config", ckpt->config, "Model config")->check(CLI::ExistingFile)->capture_default_str();
  checkpoint->add_option("--vocab", ckpt->vocab, "Vocabulary size")
      ->check(CLI::Range(16, 1000000))
      ->capture_default_str();
  checkpoint->add_option("--dir", ckpt->dir, "Folder on the disk to measure")->capture_default_str();
  checkpoint->add_option("--repeats", ckpt->repeats, "Timed runs (best is reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  bench->require_subcommand(1);
  return {bench,
          [opt, kernels, ckpt, checkpoint]() {
            if (checkpoint->parsed()) return run_checkpoint_bench(*ckpt);
            return kernels->parsed() ? run_kernel_bench(*opt) : 1;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
