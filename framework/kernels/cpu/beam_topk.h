// Beam search's choice of continuations (kernels::beam_topk, documented in kernels/dispatch.h).
#pragma once

#include "kernels/beam_topk_types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

// float64 [S, count, 2] of (score, flat index), best first, (-inf, -1) past the last candidate.
Tensor beam_topk(const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only,
                 const kernels::BeamTopKOptions& opt);

}  // namespace tessera::cpu
