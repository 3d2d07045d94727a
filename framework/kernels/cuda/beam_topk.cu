// Beam search's choice of continuations: one block a sentence picks its `count` best candidates
// in as many rounds, each a block-wide maximum over the candidates ranking after the last pick.
// The ranking (higher score, then lower flat index) is a strict total order, so every reduction
// order finds the same pick: the CPU twin's results exactly. count passes over beam * vocab
// floats a step are cheap beside the decoder step that made them, and keep no per-thread lists.
#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

// (score a, index a) ranks before (score b, index b); index -1 is no candidate and ranks last.
__device__ __forceinline__ bool ranks_before(double a_score, int a_index, double b_score, int b_index) {
  if (a_index < 0) return false;
  if (b_index < 0) return true;
  return a_score > b_score || (a_score == b_score && a_index < b_index);
}

// The best of the warp's (score, index) pairs, in every lane.
__device__ __forceinline__ void warp_best(double& score, int& index) {
  for (int o = 16; o > 0; o >>= 1) {
    const double other_score = __shfl_xor_sync(0xffffffffu, score, o);
    const int other_index = __shfl_xor_sync(0xffffffffu, index, o);
    if (ranks_before(other_score, other_index, score, index)) {
      score = other_score;
      index = other_index;
    }
  }
}

// This thread's best candidate of the sentence ranking after (after_score, after_index).
__device__ void thread_best(const float* __restrict__ logp, const double* __restrict__ beam_scores, bool only_eos,
                            const BeamTopKShape& s, std::int64_t sentence, double after_score, int after_index,
                            double& score, int& index) {
  score = 0.0;
  index = -1;
  if (only_eos && s.eos < 0) return;
  const std::int64_t begin = only_eos ? s.eos : 0, end = only_eos ? s.eos + 1 : s.vocab;
  for (std::int64_t j = 0; j < s.beam; ++j) {
    const double base = beam_scores[sentence * s.beam + j];
    if (!(base > -INFINITY)) continue;  // a dead row
    const float* row = logp + (sentence * s.beam + j) * s.vocab;
    for (std::int64_t v = begin + threadIdx.x; v < end; v += blockDim.x) {
      if (v == s.never_output0 || v == s.never_output1) continue;
      const double x = base + static_cast<double>(row[v]);
      const int at = static_cast<int>(j * s.vocab + v);
      if (isnan(x) || (after_index >= 0 && !ranks_before(after_score, after_index, x, at))) continue;
      if (ranks_before(x, at, score, index)) {
        score = x;
        index = at;
      }
    }
  }
}

__global__ void beam_topk_kernel(const float* __restrict__ logp, const double* __restrict__ beam_scores,
                                 const std::int32_t* __restrict__ eos_only, double* __restrict__ out, BeamTopKShape s) {
  __shared__ double warp_score[32];
  __shared__ int warp_index[32];
  const std::int64_t sentence = blockIdx.x;
  const bool only_eos = eos_only[sentence] != 0;
  double* o = out + sentence * s.count * 2;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  double last_score = 0.0;
  int last_index = -1;  // the previous round's pick; -1: none yet
  for (std::int64_t c = 0; c < s.count; ++c) {
    double score = 0.0;
    int index = -1;
    thread_best(logp, beam_scores, only_eos, s, sentence, last_score, last_index, score, index);
    warp_best(score, index);
    __syncthreads();  // the previous round's readers are done with the scratch
    if (lane == 0) {
      warp_score[warp] = score;
      warp_index[warp] = index;
    }
    __syncthreads();
    score = lane < warps ? warp_score[lane] : 0.0;
    index = lane < warps ? warp_index[lane] : -1;
    warp_best(score, index);  // every warp finds the same pick
    if (index < 0) {          // no candidate left: the rest are (-inf, -1)
      for (std::int64_t r = c + static_cast<std::int64_t>(threadIdx.x); r < s.count; r += blockDim.x) {
        o[2 * r] = -INFINITY;
        o[2 * r + 1] = -1.0;
      }
      return;
    }
    if (threadIdx.x == 0) {
      o[2 * c] = score;
      o[2 * c + 1] = static_cast<double>(index);
    }
    last_score = score;
    last_index = index;
  }
}

}  // namespace

cudaError_t launch_beam_topk(const float* logp, const double* beam_scores, const std::int32_t* eos_only, double* out,
                             const BeamTopKShape& s, cudaStream_t stream) {
  if (s.sentences == 0 || s.count == 0) return cudaSuccess;
  beam_topk_kernel<<<static_cast<unsigned>(s.sentences), kThreads, 0, stream>>>(logp, beam_scores, eos_only, out, s);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
