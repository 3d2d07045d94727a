#include "kernels/cuda/adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda/device.h"

namespace tessera::cuda {

FusedAdam::FusedAdam(std::vector<AdamParam> params) : params_(std::move(params)) {
  std::vector<AdamSegment> segments;
  std::vector<std::int32_t> chunk_segment;
  std::vector<std::int64_t> chunk_start;
  for (const AdamParam& p : params_) {
    for (const Tensor* t : {&p.weight, &p.grad, &p.exp_avg, &p.exp_avg_sq}) {
      check_on_gpu("cuda::FusedAdam", *t);
      TESSERA_CHECK(t->dtype() == DType::f32 && t->shape() == p.weight.shape(),
                    "cuda::FusedAdam: {} does not match the float32 weight {}", t->describe(), p.weight.describe());
    }
    if (p.weight_bf16.defined())
      TESSERA_CHECK(p.weight_bf16.device() == Device::cuda && p.weight_bf16.dtype() == DType::bf16 &&
                        p.weight_bf16.shape() == p.weight.shape(),
                    "cuda::FusedAdam: the bfloat16 copy {} does not match {}", p.weight_bf16.describe(),
                    p.weight.describe());
    const auto index = static_cast<std::int32_t>(segments.size());
    segments.push_back({static_cast<float*>(p.weight.raw_data()), static_cast<const float*>(p.grad.raw_data()),
                        static_cast<float*>(p.exp_avg.raw_data()), static_cast<float*>(p.exp_avg_sq.raw_data()),
                        p.weight_bf16.defined() ? static_cast<std::uint16_t*>(p.weight_bf16.raw_data()) : nullptr,
                        p.weight.numel()});
    for (std::int64_t start = 0; start < p.weight.numel(); start += kAdamChunk) {
      chunk_segment.push_back(index);
      chunk_start.push_back(start);
    }
  }
  chunks_ = static_cast<std::int64_t>(chunk_start.size());
  // The three tables travel in one int32 upload (one host-to-device copy per step): the segment
  // structs as raw bytes, then the int64 chunk starts as two int32 halves each (little endian),
  // both at 8-byte offsets, then the chunks' segments.
  const std::size_t bytes = segments.size() * sizeof(AdamSegment);
  const std::size_t segment_words = ((bytes + 7) / 8) * 2, start_words = 2 * chunk_start.size();
  std::vector<std::int32_t> table(segment_words + start_words + chunk_segment.size());
  if (bytes > 0) std::memcpy(table.data(), segments.data(), bytes);
  if (!chunk_start.empty())
    std::memcpy(table.data() + segment_words, chunk_start.data(), chunk_start.size() * sizeof(std::int64_t));
  std::copy(chunk_segment.begin(), chunk_segment.end(),
            table.begin() + static_cast<std::ptrdiff_t>(segment_words + start_words));
  table_ = Tensor::from(table, {static_cast<std::int64_t>(table.size())}).to(Device::cuda);
  const auto* base = static_cast<const std::int32_t*>(table_.raw_data());
  segments_ = reinterpret_cast<const AdamSegment*>(base);
  chunk_start_ = reinterpret_cast<const std::int64_t*>(base + segment_words);
  chunk_segment_ = base + segment_words + start_words;
}

void FusedAdam::step(double lr, double beta1, double beta2, double eps, long t) {
  TESSERA_CHECK(t >= 1, "cuda::FusedAdam::step: step {} must be at least 1", t);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  // The same float32 values the CPU twin gets from optim::Adam.
  const AdamHyper h{static_cast<float>(beta1), static_cast<float>(beta2), static_cast<float>(lr / bc1),
                    static_cast<float>(1.0 / bc2), static_cast<float>(eps)};
  check_launch("cuda::FusedAdam::step", launch_adam(segments_, chunk_segment_, chunk_start_, chunks_, h, nullptr));
}

}  // namespace tessera::cuda
