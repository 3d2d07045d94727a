#include "autograd/projected_cross_entropy.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/reduce.h"

namespace tessera::ag {
namespace {

struct BlockOutputs {
  Tensor loss, nll;                            // [N] per-row, as cross_entropy_forward's
  Tensor dh, dw;                               // d(sum of losses)/dh and /dw, undefined when not wanted
  std::optional<cpu::PackedWeight> w_columns;  // w packed as the B of dz @ w, for every block's dh
};

// One block of rows [r0, r0 + rows): its logits into z, the per-row losses into out, and (when
// wanted) the gradients: dh's rows written, dw accumulated (assigned by the first block).
void project_block(const Tensor& h, const Tensor& w, const Tensor& targets, double smoothing, std::int32_t ignore_index,
                   std::int64_t r0, std::int64_t rows, Tensor& z, BlockOutputs& out) {
  const Tensor hb = h.narrow_rows(r0, rows), tb = targets.narrow_rows(r0, rows);
  Tensor zb = z.narrow_rows(0, rows);
  cpu::matmul_into(zb, hb, w, false, true, 1.0, 0.0);
  // The logits' block turns into their gradient dz in place, also when no gradient is wanted: the
  // loss then rounds as training's does (validation's loss of a batch is training's, bit for bit).
  const kernels::CrossEntropyOutput f = cpu::cross_entropy_forward_backward(zb, tb, smoothing, ignore_index);
  out.loss.narrow_rows(r0, rows).copy_from(f.loss);
  out.nll.narrow_rows(r0, rows).copy_from(f.nll);
  if (!out.dh.defined() && !out.dw.defined()) return;
  const Tensor& dz = zb;
  if (out.w_columns) {
    cpu::packed_gemm_nt(rows, dz.data<float>(), dz.size(1), *out.w_columns, out.dh.data<float>() + r0 * h.size(1),
                        h.size(1));
  } else if (out.dh.defined()) {
    Tensor dhb = out.dh.narrow_rows(r0, rows);
    cpu::matmul_into(dhb, dz, w, false, false, 1.0, 0.0);
  }
  if (out.dw.defined()) cpu::matmul_into(out.dw, dz, hb, true, false, 1.0, r0 == 0 ? 0.0 : 1.0);
}

}  // namespace

Var projected_cross_entropy(const Var& h, const Var& w, const Tensor& targets, double smoothing,
                            std::int32_t ignore_index, double* nll_sum, std::int64_t block_rows) {
  const Tensor vh = h.value(), vw = w.value();
  const char* op = "projected_cross_entropy";
  check_cpu(op, vh);
  check_cpu(op, vw);
  check_rank(op, vh, 2, "h");
  check_rank(op, vw, 2, "w");
  check_same_dtype(op, vh, vw);
  TESSERA_CHECK(vh.size(1) == vw.size(1), "{}: h {} and w {} differ in the inner dimension", op, shape_str(vh.shape()),
                shape_str(vw.shape()));
  TESSERA_CHECK(targets.dim() == 1 && targets.size(0) == vh.size(0), "{}: targets {} do not match h {}", op,
                shape_str(targets.shape()), shape_str(vh.shape()));
  TESSERA_CHECK(block_rows >= 1, "{}: block_rows {} must be positive", op, block_rows);
  const std::int64_t n = vh.size(0), v = vw.size(0);
  const bool grads = grad_enabled();
  BlockOutputs out{Tensor::empty({n}, vh.dtype()), Tensor::empty({n}, vh.dtype()),
                   grads && h.requires_grad() ? Tensor::empty(vh.shape(), vh.dtype()) : Tensor(),
                   grads && w.requires_grad() ? Tensor::empty(vw.shape(), vw.dtype()) : Tensor(), std::nullopt};
  if (out.dw.defined() && n == 0) out.dw.fill(0.0);  // no block assigns it
  Tensor z = Tensor::empty({std::min(block_rows, std::max<std::int64_t>(n, 1)), v}, vh.dtype());
  // w packed once for every block's logits and dh (BLAS packed it again for each).
  std::optional<cpu::PackedWeightScope> packed;
  const bool pack = n > block_rows && !cpu::bf16_matmul() && vw.dtype() == DType::f32;
  if (pack) packed.emplace(std::vector<Tensor>{vw});
  if (pack && out.dh.defined() && cpu::packed_gemm_available())
    out.w_columns.emplace(vw.data<float>(), vw.size(1), v, vw.size(1), false);
  for (std::int64_t r0 = 0; r0 < n; r0 += block_rows)
    project_block(vh, vw, targets, smoothing, ignore_index, r0, std::min(block_rows, n - r0), z, out);
  if (nll_sum) *nll_sum = cpu::sum_all(out.nll).item();
  const Tensor dh = out.dh, dw = out.dw;
  return make_result(cpu::sum_all(out.loss), op, {h, w}, [dh, dw](const Tensor& g) {
    const double gs = g.item();  // the loss is a scalar: its gradient scales the precomputed ones
    return std::vector<Tensor>{dh.defined() ? cpu::affine(dh, gs, 0.0) : Tensor(),
                               dw.defined() ? cpu::affine(dw, gs, 0.0) : Tensor()};
  });
}

}  // namespace tessera::ag
