// The default job until the Transformer lands: fit a small MLP classifier with the autograd.
#pragma once

#include <cstdint>

namespace tessera::launch {

struct DemoOptions {
  int steps = 300;
  int hidden = 64;
  int batch = 256;
  double lr = 0.01;
  std::uint64_t seed = 1;
  int log_every = 50;
};

// Trains on a synthetic two-spirals task; returns 0 when the final accuracy beats 90%.
int run_demo_training(const DemoOptions& opt);

}  // namespace tessera::launch
