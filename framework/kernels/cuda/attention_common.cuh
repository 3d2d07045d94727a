// Device helpers both attention kernels share (attention.cu, attention_fa2.cu): the masks.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace tessera::cuda {

// Whether query qi sees key kj: key padding, causal aligned bottom right (j <= i + Lk - Lq), keys
// past Lk and queries past Lq masked.
__device__ __forceinline__ bool attention_visible(const AttentionShape& s, const std::int32_t* pad, std::int64_t b,
                                                  std::int64_t qi, std::int64_t kj) {
  return qi < s.q_len && kj < s.k_len && (pad == nullptr || pad[b * s.k_len + kj] == 0) &&
         (!s.causal || kj <= qi + (s.k_len - s.q_len));
}

// The keys a block of query rows [q0, q0 + rows) needs: [0, end); causal stops after the last
// row's last visible key.
__device__ __forceinline__ std::int64_t attention_key_end(const AttentionShape& s, std::int64_t q0, int rows) {
  if (!s.causal) return s.k_len;
  const std::int64_t last = q0 + rows - 1 + (s.k_len - s.q_len);
  return last + 1 < s.k_len ? (last + 1 > 0 ? last + 1 : 0) : s.k_len;
}

}  // namespace tessera::cuda
