// `tessera bench kernels`: CPU kernel throughput next to references measured in the same run.
#pragma once

namespace tessera::launch {

struct BenchOptions {
  int repeats = 5;
};

int run_kernel_bench(const BenchOptions& opt);

}  // namespace tessera::launch
