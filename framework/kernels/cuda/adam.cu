// Adam over every parameter in one launch: the parameters are cut into chunks of kAdamChunk
// elements, one block per chunk, so small tensors (biases, norms) cost no launch of their own.
#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void adam_kernel(const AdamSegment* __restrict__ segments, const std::int32_t* __restrict__ chunk_segment,
                            const std::int64_t* __restrict__ chunk_start, AdamHyper h) {
  const AdamSegment s = segments[chunk_segment[blockIdx.x]];
  const std::int64_t begin = chunk_start[blockIdx.x];
  const std::int64_t end = begin + kAdamChunk < s.n ? begin + kAdamChunk : s.n;
  for (std::int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    // The CPU twin's expressions in its order, each operation rounded on its own (no fused
    // multiply-add), so the update is bit-identical to cpu::adam_update<float>.
    const float g = s.grad[j];
    const float m = __fadd_rn(__fmul_rn(h.beta1, s.exp_avg[j]), __fmul_rn(1.0f - h.beta1, g));
    const float v = __fadd_rn(__fmul_rn(h.beta2, s.exp_avg_sq[j]), __fmul_rn(__fmul_rn(1.0f - h.beta2, g), g));
    const float w = __fsub_rn(
        s.weight[j],
        __fdiv_rn(__fmul_rn(h.step_size, m), __fadd_rn(__fsqrt_rn(__fmul_rn(v, h.inv_bias_correction2)), h.eps)));
    s.exp_avg[j] = m;
    s.exp_avg_sq[j] = v;
    s.weight[j] = w;
    if (s.weight_bf16 != nullptr) {
      const __nv_bfloat16 b = __float2bfloat16(w);
      s.weight_bf16[j] = *reinterpret_cast<const std::uint16_t*>(&b);
    }
  }
}

}  // namespace

cudaError_t launch_adam(const AdamSegment* segments, const std::int32_t* chunk_segment, const std::int64_t* chunk_start,
                        std::int64_t chunks, AdamHyper hyper, cudaStream_t stream) {
  if (chunks == 0) return cudaSuccess;
  adam_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(segments, chunk_segment, chunk_start, hyper);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
