// Train's pre-flight memory check: the memory model's peak per rank (plan/memory_model.h) for the
// config against what the rank can use, before any vocabulary is trained or corpus encoded.
#pragma once

#include <cstdint>
#include <string>

#include "io/run_config.h"
#include "plan/memory_model.h"

namespace tessera::plan {

// Memory a process holds besides its tensors' peak. Host: 256 MiB (the corpus, vocabularies,
// libraries and their buffers) and the allocator's cache of freed blocks, up to 512 MiB and at most
// half the peak (measured: 0.71 GiB for multi30k at batch_tokens 4096, 0.34 GiB for base at 2048).
// GPU: the CUDA context and cuBLAS's workspace.
double outside_tensors_bytes(const MemoryEstimate& e, bool gpu);

struct VocabularySizes {
  std::int64_t src = 0, tgt = 0;
};
// The vocabularies' sizes before any is trained: a SentencePiece model that already exists
// (data.vocab, or output.dir's from an earlier start), else data.vocab_size; a synthetic task's
// symbols.
VocabularySizes planned_vocabulary_sizes(const io::RunConfig& cfg);

// The config's model with those vocabularies, its layout, and its peak memory per rank.
MemoryEstimate estimate_for(const io::RunConfig& cfg);

// What one rank may use, and where the figure comes from.
struct MemoryBudget {
  double bytes = 0;
  std::string source;  // e.g. "host: MemAvailable 22.9 GiB, cgroup limit 16.0 GiB, / 2 ranks on this machine"
};
// Host: the least of /proc/meminfo's MemAvailable and the cgroup's limit (v2 memory.max, v1
// memory.limit_in_bytes), divided among the `local_ranks` on this machine. GPU: the device's free
// memory. TESSERA_FAULT_MEMORY_AVAILABLE_MB (fault_injection.h) replaces the figure before the
// division (tests).
MemoryBudget rank_memory_budget(bool gpu, int local_ranks);

enum class Verdict { fits, near, over };
struct MemoryCheck {
  Verdict verdict = Verdict::fits;
  double needed_bytes = 0;  // the predicted peak plus outside_tensors_bytes
  std::string message;      // for near and over: the prediction, the budget and what would fit
};
// Near: over 90% of the budget. Over: more than the budget; the message suggests, of the settings
// this build accepts, a smaller train.batch_tokens with train.accumulate keeping the tokens per
// update, train.recompute: layer, parallel.zero: 1, and (on GPUs) more tensor-parallel ranks.
MemoryCheck check_memory(const io::RunConfig& cfg, const MemoryBudget& budget);

}  // namespace tessera::plan
