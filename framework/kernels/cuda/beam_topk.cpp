#include "kernels/cuda/beam_topk.h"

#include "kernels/cuda/device.h"

namespace tessera::cuda {

Tensor beam_topk(const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only,
                 const kernels::BeamTopKOptions& opt) {
  const char* op = "cuda::beam_topk";
  check_f32_gpu(op, logp, "logp");
  kernels::check_beam_topk(op, logp, beam_scores, eos_only, opt);
  const Tensor scores = beam_scores.to(Device::cuda), only_eos = eos_only.to(Device::cuda);
  const std::int64_t sentences = logp.size(0) / opt.beam;
  Tensor out = Tensor::empty({sentences, opt.count, 2}, DType::f64, Device::cuda);
  const BeamTopKShape shape{sentences,           opt.beam,           logp.size(1), opt.count, opt.eos,
                            opt.never_output[0], opt.never_output[1]};
  check_launch(
      op, launch_beam_topk(static_cast<const float*>(logp.raw_data()), static_cast<const double*>(scores.raw_data()),
                           static_cast<const std::int32_t*>(only_eos.raw_data()), static_cast<double*>(out.raw_data()),
                           shape, nullptr));
  return out;
}

}  // namespace tessera::cuda
