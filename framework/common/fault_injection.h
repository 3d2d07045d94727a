// Fault injection for the failure tests, in one place. Each hook reads one environment variable,
// TESSERA_FAULT_<NAME>, unset in normal runs. Its value lists where it hits: comma-separated items
// "RANK" or "RANK:WHERE" (WHERE: a training step or a stage name). The hooks:
// - HANG=RANK:STEP, NAN=RANK:STEP, SIGNAL=RANK:STEP (training; step 0 is the data preparation):
//   the rank stops responding, its backward starts from NaN, or it gets a SIGTERM just after the
//   ranks agreed whether to stop at that step.
// - SETUP_HANG=RANK:STAGE: the rank stops responding at a stage of the process grid's setup (mpi,
//   local, nccl, split).
// - SAVE=RANK, SAVE_HANG=RANK, LOAD_HANG=RANK: a tensor-parallel checkpoint save fails (a full disk),
//   or the rank stops responding in a tensor-parallel save or load.
// - DECODE_HANG=RANK: the rank of an mpirun job stops responding before it decodes.
// - MEMORY_AVAILABLE_MB=MB: the memory train's pre-flight check takes this machine (or GPU) to have
//   free, instead of MemAvailable, the cgroup limit or the GPU's free memory.
// - TEXT_READ=FILE: rank 0 creates FILE once it has read the training text and waits (at most
//   60 s) until FILE is gone, so a test can change the text in between.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

namespace tessera::fault {

// The value of TESSERA_FAULT_<name>, or nullptr when it is not set.
inline const char* setting(std::string_view name) {
  return std::getenv(("TESSERA_FAULT_" + std::string(name)).c_str());
}

// Whether TESSERA_FAULT_<name> has an item for `rank` at `where` (an item "RANK" hits where
// `where` is empty).
inline bool injected(std::string_view name, int rank, std::string_view where = {}) {
  const char* spec = setting(name);
  if (spec == nullptr) return false;
  std::string_view items(spec);
  while (!items.empty()) {
    const std::size_t comma = items.find(',');
    const std::string_view item = items.substr(0, comma);
    items = comma == std::string_view::npos ? std::string_view() : items.substr(comma + 1);
    const std::size_t colon = item.find(':');
    const std::string_view at = colon == std::string_view::npos ? std::string_view() : item.substr(colon + 1);
    if (std::atoi(std::string(item.substr(0, colon)).c_str()) == rank && at == where) return true;
  }
  return false;
}

// Stops responding, as a stuck process would.
[[noreturn]] inline void hang() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace tessera::fault
