#include "autograd/checkpoint.h"

#include <memory>

namespace tessera::ag {

Var checkpoint(CheckpointFn fn, std::vector<Var> inputs) {
  bool needs_grad = false;
  for (const Var& v : inputs) needs_grad = needs_grad || v.requires_grad();
  if (!grad_enabled() || !needs_grad) return fn(inputs);
  Tensor out;
  {
    NoGradGuard no_graph;
    out = fn(inputs).value();
  }
  const Shape shape = out.shape();
  auto recompute = [fn = std::move(fn), inputs, shape](const Tensor& grad) {
    Var again;
    {
      GradModeGuard record(true);  // also when backward() was called under a NoGradGuard
      again = fn(inputs);
    }
    TESSERA_CHECK(again.shape() == shape, "checkpoint: the recomputed output has shape {}, the first run {}",
                  shape_str(again.shape()), shape_str(shape));
    // The gradients reach the inputs inside backward_to; none is left for this node to pass on.
    backward_to(again, grad, inputs);
    return std::vector<Tensor>{};
  };
  return make_result(std::move(out), "checkpoint", std::move(inputs), std::move(recompute));
}

}  // namespace tessera::ag
