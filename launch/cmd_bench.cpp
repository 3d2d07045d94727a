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
  add_whole_number_option(kernels, "--repeats", opt->repeats, 1, 1000, "Timed runs per kernel (best is reported)");
  auto ckpt = std::make_shared<CheckpointBenchOptions>();
  CLI::App* checkpoint = bench->add_subcommand(
      "checkpoint", "Save and load time of a model with its Adam state vs. dd's write and read rates");
  checkpoint->add_option("--config", ckpt->config, "Model config")->check(CLI::ExistingFile)->capture_default_str();
  add_whole_number_option(checkpoint, "--vocab", ckpt->vocab, 16, 1000000, "Vocabulary size");
  checkpoint->add_option("--dir", ckpt->dir, "Folder on the disk to measure")->capture_default_str();
  add_whole_number_option(checkpoint, "--repeats", ckpt->repeats, 1, 100, "Timed runs (best is reported)");
  bench->require_subcommand(1);
  return {bench,
          [opt, kernels, ckpt, checkpoint]() {
            if (checkpoint->parsed()) return run_checkpoint_bench(*ckpt);
            return kernels->parsed() ? run_kernel_bench(*opt) : 1;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
