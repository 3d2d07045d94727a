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
  bench->require_subcommand(1);
  return {bench, [opt, kernels]() { return kernels->parsed() ? run_kernel_bench(*opt) : 1; }};
}

}  // namespace tessera::launch
