// Beam search's choice of continuations (kernels::beam_topk): its options and the argument checks
// both backends share (as kernels/types.h holds the other ops').
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

namespace tessera::kernels {

struct BeamTopKOptions {
  std::int64_t beam = 1;                                // rows of log-probabilities per sentence
  std::int64_t count = 2;                               // candidates kept per sentence
  std::int32_t eos = -1;                                // the one token of a sentence marked eos_only
  std::array<std::int32_t, 2> never_output = {-1, -1};  // ids that are no candidate (pad, bos); -1: none
  // The input holds logits: their log-softmax is taken row by row inside the kernel (the CPU's
  // exactly as log_softmax computes it, without writing it out; the GPU runs log_softmax first).
  bool logits = false;
};

// logp float32 [S * beam, V], beam_scores float64 [S * beam] and eos_only int32 [S], count >= 1,
// eos and the never_output ids inside the vocabulary (or -1), beam * V within int32.
void check_beam_topk(const char* op, const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only,
                     const BeamTopKOptions& opt);

}  // namespace tessera::kernels
