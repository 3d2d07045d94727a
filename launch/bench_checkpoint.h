// `tessera bench checkpoint`: checkpoint save/load rates next to dd's on the same folder.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::launch {

struct CheckpointBenchOptions {
  std::string config = "configs/base.yaml";  // the model whose checkpoint is timed
  std::int64_t vocab = 37000;                // the paper's shared vocabulary
  std::string dir = "checkpoints/bench";     // where to write (the disk being measured)
  int repeats = 3;
};

int run_checkpoint_bench(const CheckpointBenchOptions& opt);

}  // namespace tessera::launch
