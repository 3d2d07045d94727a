#include "kernels/cuda/attention.h"

#include <cmath>

#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"

namespace tessera::cuda {
namespace {

struct Prepared {
  AttentionShape shape;
  Elem elem;
  Tensor padding;  // int32 [B, Lk] on the GPU, or undefined
};

// The tiles are sized for sm_80/sm_90 (up to 163/227 KB of shared memory per block). Smaller
// GPUs (sm_86/sm_89: 99 KB) would fail the launch with "invalid argument"; say why instead.
void check_shared_memory(const char* op, bool backward, std::int64_t head_dim, const Tensor& q, Elem elem, bool tf32) {
  int device = 0, allowed = 0;
  check_launch(op, cudaGetDevice(&device));
  check_launch(op, cudaDeviceGetAttribute(&allowed, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int needed = attention_shared_bytes(head_dim, elem, backward, tf32);
  TESSERA_CHECK(needed <= allowed,
                "{}: head dimension {} in {} needs {} bytes of shared memory per block, this GPU allows {}: the "
                "attention kernels need an sm_80 or sm_90 class GPU (A100, H100, H200)",
                op, head_dim, dtype_name(q.dtype()), needed, allowed);
}

// Checks the inputs of the forward, or of the backward (whose tiles need more shared memory).
// opt.key_length > 0 (forward only): the keys are the first key_length positions of k and v, a
// decoder cache read in place.
Prepared prepare(const char* op, bool backward, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& key_padding, const kernels::AttentionOptions& opt) {
  const Elem elem = elem_of(op, q);
  check_rank(op, q, 4, "q");
  check_rank(op, k, 4, "k");
  check_rank(op, v, 4, "v");
  TESSERA_CHECK(
      k.dtype() == q.dtype() && v.dtype() == q.dtype() && k.device() == q.device() && v.device() == q.device(),
      "{}: q {}, k {}, v {} must share dtype and device", op, q.describe(), k.describe(), v.describe());
  const std::int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), rows = k.size(2);
  TESSERA_CHECK(k.shape() == Shape({B, H, rows, D}) && v.shape() == Shape({B, H, rows, D}),
                "{}: k {} and v {} must be [{}, {}, Lk, {}] for q {}", op, k.describe(), v.describe(), B, H, D,
                q.describe());
  TESSERA_CHECK(opt.key_length >= 0 && opt.key_length <= rows && (!backward || opt.key_length == 0),
                "{}: key_length {} outside k {} (or in a backward)", op, opt.key_length, k.describe());
  const std::int64_t Lk = opt.key_length > 0 ? opt.key_length : rows;
  TESSERA_CHECK(attention_supports_head_dim(D), "{}: head dimension {} is not supported on the GPU (32, 64 or 128)", op,
                D);
  TESSERA_CHECK(B <= 65535 && H <= 65535, "{}: batch {} or heads {} exceeds 65535", op, B, H);
  const bool tf32 = elem == Elem::f32 && allow_tf32();  // train.tf32, as for the GEMMs
  check_shared_memory(op, backward, D, q, elem, tf32);
  Prepared p{{B, H, Lq, Lk, D, opt.causal,
              static_cast<float>(opt.scale > 0.0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(D))), rows, tf32},
             elem,
             {}};
  if (key_padding.defined()) {
    TESSERA_CHECK(key_padding.dtype() == DType::i32 && key_padding.shape() == Shape({B, Lk}),
                  "{}: key_padding {} must be int32 [{}, {}]", op, key_padding.describe(), B, Lk);
    p.padding = key_padding.to(Device::cuda);
  }
  return p;
}

const std::int32_t* padding_ptr(const Prepared& p) {
  return p.padding.defined() ? static_cast<const std::int32_t*>(p.padding.raw_data()) : nullptr;
}

}  // namespace

kernels::AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                           const kernels::AttentionOptions& opt) {
  const char* op = "cuda::attention_forward";
  const Prepared p = prepare(op, false, q, k, v, key_padding, opt);
  kernels::AttentionOutput out{Tensor::empty(q.shape(), q.dtype(), Device::cuda),
                               Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32, Device::cuda)};
  check_launch(op,
               launch_attention_forward(q.raw_data(), k.raw_data(), v.raw_data(), padding_ptr(p), out.out.raw_data(),
                                        static_cast<float*>(out.lse.raw_data()), p.shape, p.elem, nullptr));
  return out;
}

kernels::AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& key_padding, const kernels::AttentionOutput& fwd,
                                           const kernels::AttentionOptions& opt) {
  const char* op = "cuda::attention_backward";
  const Prepared p = prepare(op, true, q, k, v, key_padding, opt);
  TESSERA_CHECK(dout.shape() == q.shape() && dout.dtype() == q.dtype() && dout.device() == Device::cuda,
                "{}: dout {} must match q {}", op, dout.describe(), q.describe());
  check_on_gpu(op, fwd.out);
  check_on_gpu(op, fwd.lse);
  TESSERA_CHECK(fwd.out.shape() == q.shape() && fwd.out.dtype() == q.dtype() && fwd.lse.dtype() == DType::f32 &&
                    fwd.lse.shape() == Shape({q.size(0), q.size(1), q.size(2)}),
                "{}: the forward's out {} and lse {} do not fit q {}", op, fwd.out.describe(), fwd.lse.describe(),
                q.describe());
  kernels::AttentionGrads g{Tensor::empty(q.shape(), q.dtype(), Device::cuda),
                            Tensor::empty(k.shape(), k.dtype(), Device::cuda),
                            Tensor::empty(v.shape(), v.dtype(), Device::cuda)};
  Tensor dq_accum = Tensor::empty(q.shape(), DType::f32, Device::cuda);
  Tensor delta = Tensor::empty(fwd.lse.shape(), DType::f32, Device::cuda);
  check_launch(
      op, launch_attention_backward(dout.raw_data(), q.raw_data(), k.raw_data(), v.raw_data(), padding_ptr(p),
                                    fwd.out.raw_data(), static_cast<const float*>(fwd.lse.raw_data()),
                                    static_cast<float*>(dq_accum.raw_data()), static_cast<float*>(delta.raw_data()),
                                    g.dq.raw_data(), g.dk.raw_data(), g.dv.raw_data(), p.shape, p.elem, nullptr));
  return g;
}

}  // namespace tessera::cuda
