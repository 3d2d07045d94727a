// CUDA twin of kernels/cpu/beam_topk.h: beam search's candidates chosen on the GPU.
#pragma once

#include "kernels/beam_topk_types.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

// logp on the GPU; beam_scores and eos_only on the CPU or the GPU (copied there).
Tensor beam_topk(const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only,
                 const kernels::BeamTopKOptions& opt);

}  // namespace tessera::cuda
