#include "autograd/ops.h"

#include "kernels/dispatch.h"

namespace tessera::ag {

// Every kernel goes through the dispatch layer: the same op runs on the CPU or the GPU by the
// device of its inputs.
using namespace tessera::kernels;

// ------------------------------------------------------------ elementwise
// Gradients are computed only for inputs that need one (a positional table added to the
// embeddings needs none).
Var add(const Var& a, const Var& b) {
  const Shape sa = a.shape(), sb = b.shape();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return make_result(kernels::add(a.value(), b.value()), "add", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{need_a ? sum_to_shape(g, sa) : Tensor(), need_b ? sum_to_shape(g, sb) : Tensor()};
  });
}

Var sub(const Var& a, const Var& b) {
  const Shape sa = a.shape(), sb = b.shape();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return make_result(kernels::sub(a.value(), b.value()), "sub", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{need_a ? sum_to_shape(g, sa) : Tensor(),
                               need_b ? sum_to_shape(affine(g, -1.0, 0.0), sb) : Tensor()};
  });
}

Var mul(const Var& a, const Var& b) {
  const Tensor va = a.value(), vb = b.value();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return make_result(kernels::mul(va, vb), "mul", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{need_a ? sum_to_shape(kernels::mul(g, vb), va.shape()) : Tensor(),
                               need_b ? sum_to_shape(kernels::mul(g, va), vb.shape()) : Tensor()};
  });
}

Var div(const Var& a, const Var& b) {
  const Tensor va = a.value(), vb = b.value();
  const Shape sa = va.shape();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  Tensor out = kernels::div(va, vb);
  return make_result(out, "div", {a, b}, [=](const Tensor& g) {
    Tensor ga = kernels::div(g, vb);                                           // d(a/b)/da = 1/b
    Tensor gb = need_b ? affine(kernels::mul(ga, out), -1.0, 0.0) : Tensor();  // d(a/b)/db = -(a/b)/b
    return std::vector<Tensor>{need_a ? sum_to_shape(ga, sa) : Tensor(),
                               need_b ? sum_to_shape(gb, vb.shape()) : Tensor()};
  });
}

Var neg(const Var& x) { return scale(x, -1.0); }

Var scale(const Var& x, double alpha) {
  return make_result(affine(x.value(), alpha, 0.0), "scale", {x},
                     [alpha](const Tensor& g) { return std::vector<Tensor>{affine(g, alpha, 0.0)}; });
}

Var relu(const Var& x) {
  const Tensor vx = x.value();
  return make_result(kernels::unary(UnaryOp::relu, vx), "relu", {x},
                     [vx](const Tensor& g) { return std::vector<Tensor>{relu_backward(g, vx)}; });
}

Var exp(const Var& x) {
  Tensor out = kernels::unary(UnaryOp::exp, x.value());
  return make_result(out, "exp", {x}, [out](const Tensor& g) { return std::vector<Tensor>{kernels::mul(g, out)}; });
}

Var log(const Var& x) {
  const Tensor vx = x.value();
  return make_result(kernels::unary(UnaryOp::log, vx), "log", {x},
                     [vx](const Tensor& g) { return std::vector<Tensor>{kernels::div(g, vx)}; });
}

Var tanh(const Var& x) {
  Tensor out = kernels::unary(UnaryOp::tanh, x.value());
  return make_result(out, "tanh", {x}, [out](const Tensor& g) {
    // d tanh = 1 - tanh^2
    return std::vector<Tensor>{kernels::mul(g, affine(kernels::mul(out, out), -1.0, 1.0))};
  });
}

// ------------------------------------------------------------ reductions
Var sum(const Var& x) {
  const Shape sx = x.shape();
  return make_result(sum_all(x.value()), "sum", {x},
                     [sx](const Tensor& g) { return std::vector<Tensor>{broadcast_to(g, sx)}; });
}

Var mean(const Var& x) {
  const Shape sx = x.shape();
  const double n = static_cast<double>(x.value().numel());
  return make_result(mean_all(x.value()), "mean", {x}, [sx, n](const Tensor& g) {
    return std::vector<Tensor>{broadcast_to(affine(g, 1.0 / n, 0.0), sx)};
  });
}

namespace {
// Gradient of a reduction over `dim`: broadcast g (re-inserting dim as size 1) to the input shape.
Tensor expand_reduced(const Tensor& g, const Shape& in_shape, std::int64_t dim, double factor) {
  Shape kept = in_shape;
  const std::int64_t d = dim < 0 ? dim + static_cast<std::int64_t>(in_shape.size()) : dim;
  kept[static_cast<std::size_t>(d)] = 1;
  return broadcast_to(affine(g.reshape(kept), factor, 0.0), in_shape);
}
}  // namespace

Var sum(const Var& x, std::int64_t dim, bool keepdim) {
  const Shape sx = x.shape();
  return make_result(sum_dim(x.value(), dim, keepdim), "sum_dim", {x},
                     [sx, dim](const Tensor& g) { return std::vector<Tensor>{expand_reduced(g, sx, dim, 1.0)}; });
}

Var mean(const Var& x, std::int64_t dim, bool keepdim) {
  const Shape sx = x.shape();
  const double n = static_cast<double>(x.value().size(dim));
  return make_result(mean_dim(x.value(), dim, keepdim), "mean_dim", {x}, [sx, dim, n](const Tensor& g) {
    return std::vector<Tensor>{expand_reduced(g, sx, dim, 1.0 / n)};
  });
}

// ------------------------------------------------------------ matmul
namespace {
// Rows of t viewed as a matrix of its last dimension (also when that dimension is 0).
std::int64_t leading_rows(const Tensor& t) {
  std::int64_t rows = 1;
  for (std::int64_t i = 0; i + 1 < t.dim(); ++i) rows *= t.size(i);
  return rows;
}

// dB for a 2-D b shared by every batch of a transposed a ([..., K, M]): the per-batch products
// summed over the batch, C = A_i^T op(B).
Tensor shared_b_grad_of_transposed_a(const Tensor& va, const Tensor& vb, const Tensor& g, bool tb) {
  if (va.numel() == 0 || g.numel() == 0)  // a sum of no products (M = 0), or an empty dB (K or N = 0)
    return kernels::full(vb.shape(), 0.0, vb.dtype(), vb.device());
  const std::int64_t batch = va.numel() / (va.size(-1) * va.size(-2));  // both nonzero here
  const Tensor a3 = va.reshape({batch, va.size(-2), va.size(-1)}), g3 = g.reshape({batch, g.size(-2), g.size(-1)});
  // a is [K, M] per batch; dB (N x K when tb, K x N otherwise) is the sum of the per-batch products.
  return tb ? kernels::matmul_batch_sum(g3, a3, true, true) : kernels::matmul_batch_sum(a3, g3, false, false);
}
}  // namespace

Var matmul(const Var& a, const Var& b, bool ta, bool tb) {
  const Tensor va = a.value(), vb = b.value();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return make_result(kernels::matmul(va, vb, ta, tb), "matmul", {a, b}, [=](const Tensor& g) {
    // C = op(A) op(B): dA = dC op(B)^T (transposed back when A was), dB = op(A)^T dC (likewise).
    const bool b_shared = vb.dim() == 2 && va.dim() > 2;
    Tensor ga;  // stays undefined when a needs no gradient
    if (!need_a) {
    } else if (!ta) {
      ga = kernels::matmul(g, vb, false, !tb);
    } else if (!b_shared) {
      ga = kernels::matmul(vb, g, tb, true);
    } else {
      // dA^T = dC op(B)^T per batch, then swap the last two dimensions.
      std::vector<std::int64_t> swap_last(static_cast<std::size_t>(va.dim()));
      for (std::size_t i = 0; i < swap_last.size(); ++i) swap_last[i] = static_cast<std::int64_t>(i);
      std::swap(swap_last[swap_last.size() - 1], swap_last[swap_last.size() - 2]);
      ga = kernels::permute(kernels::matmul(g, vb, false, !tb), swap_last);
    }
    Tensor gb;  // likewise for b
    if (!need_b) {
    } else if (!b_shared) {
      gb = tb ? kernels::matmul(g, va, true, ta) : kernels::matmul(va, g, !ta, false);
    } else if (!ta) {
      // Shared b: flatten the batch of a and g into rows, one GEMM sums over all of them.
      const Tensor a2 = va.reshape({leading_rows(va), va.size(-1)}), g2 = g.reshape({leading_rows(g), g.size(-1)});
      gb = tb ? kernels::matmul(g2, a2, true, false) : kernels::matmul(a2, g2, true, false);
    } else {
      gb = shared_b_grad_of_transposed_a(va, vb, g, tb);
    }
    return std::vector<Tensor>{ga, gb};
  });
}

namespace {
// y = act(x w^T + b) over x's rows ([..., in] as [rows, in]); w [out, in] is 2-D.
Var linear_act(const Var& x, const Var& w, const Var& b, bool relu, const char* name) {
  const Tensor vx = x.value(), vw = w.value();
  TESSERA_CHECK(vw.dim() == 2 && vx.dim() >= 1, "{}: weight {} must be 2-D, input {} at least 1-D", name,
                shape_str(vw.shape()), shape_str(vx.shape()));
  const Shape sx = vx.shape();
  Shape sy = sx;
  sy.back() = vw.size(0);
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < sx.size(); ++i) rows *= sx[i];
  const Tensor x2 = vx.reshape({rows, sx.back()});
  const Tensor vb = b.defined() ? b.value() : Tensor();
  const Tensor y = kernels::linear_bias_relu(x2, vw, vb, relu);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  std::vector<Var> inputs = {x, w};
  if (b.defined()) inputs.push_back(b);
  return make_result(y.reshape(sy), name, inputs, [=](const Tensor& grad) {
    // relu's gradient from its output: y > 0 exactly where x w^T + b > 0.
    const Tensor g = relu ? relu_backward(grad.reshape(y.shape()), y) : grad.reshape(y.shape());
    std::vector<Tensor> out = {need_x ? kernels::matmul(g, vw, false, false).reshape(sx) : Tensor(),
                               need_w ? kernels::matmul(g, x2, true, false) : Tensor()};
    if (vb.defined()) out.push_back(need_b ? sum_to_shape(g, vb.shape()) : Tensor());
    return out;
  });
}
}  // namespace

Var linear(const Var& x, const Var& w, const Var& b) { return linear_act(x, w, b, false, "linear"); }

Var linear_relu(const Var& x, const Var& w, const Var& b) { return linear_act(x, w, b, true, "linear_relu"); }

// ------------------------------------------------------------ layout
Var reshape(const Var& x, const Shape& shape) {
  const Shape sx = x.shape();
  return make_result(x.value().reshape(shape), "reshape", {x},
                     [sx](const Tensor& g) { return std::vector<Tensor>{g.reshape(sx)}; });
}

Var permute(const Var& x, const std::vector<std::int64_t>& dims) {
  Tensor y = kernels::permute(x.value(), dims);  // first: it names x's shape when dims is no permutation of it
  const auto inv = kernels::inverse_permutation(dims);
  return make_result(std::move(y), "permute", {x},
                     [inv](const Tensor& g) { return std::vector<Tensor>{kernels::permute(g, inv)}; });
}

// ------------------------------------------------------------ normalization
Var softmax(const Var& x) {
  Tensor y = softmax_lastdim(x.value());
  return make_result(y, "softmax", {x}, [y](const Tensor& g) { return std::vector<Tensor>{softmax_backward(g, y)}; });
}

Var log_softmax(const Var& x) {
  Tensor y = log_softmax_lastdim(x.value());
  return make_result(y, "log_softmax", {x},
                     [y](const Tensor& g) { return std::vector<Tensor>{log_softmax_backward(g, y)}; });
}

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  const Tensor vx = x.value(), vg = gamma.value();
  LayerNormOutput f = layer_norm_forward(vx, vg, beta.value(), eps);
  const Tensor mean = f.mean, rstd = f.rstd;
  return make_result(f.y, "layer_norm", {x, gamma, beta}, [vx, vg, mean, rstd](const Tensor& g) {
    LayerNormGrads lg = layer_norm_backward(g, vx, vg, mean, rstd);
    return std::vector<Tensor>{lg.dx, lg.dgamma, lg.dbeta};
  });
}

// ------------------------------------------------------------ embedding, dropout, loss
Var embedding(const Var& weight, const Tensor& ids, std::optional<std::int32_t> zero_id) {
  const Shape sw = weight.shape();
  const DType dt = weight.value().dtype();
  const Device dev = weight.value().device();
  return make_result(embedding_forward(weight.value(), ids, zero_id), "embedding", {weight}, [=](const Tensor& g) {
    Tensor gw = Tensor::zeros(sw, dt, dev);
    embedding_backward(gw, g, ids, zero_id);
    return std::vector<Tensor>{gw};
  });
}

Var dropout(const Var& x, double p, std::uint64_t seed, std::uint64_t offset) {
  if (p == 0.0) return x;
  return make_result(dropout_forward(x.value(), p, seed, offset), "dropout", {x}, [p, seed, offset](const Tensor& g) {
    return std::vector<Tensor>{dropout_backward(g, p, seed, offset)};
  });
}

Var cross_entropy(const Var& logits, const Tensor& targets, double smoothing, std::int32_t ignore_index,
                  double* nll_sum) {
  const Tensor vz = logits.value();
  if (vz.device() != Device::cpu && grad_enabled() && logits.requires_grad()) {
    // The GPU computes the loss and its gradient in one pass over the logits; the backward only
    // scales the kept gradient (the logits themselves need not stay alive).
    CrossEntropyWithGrad f = cross_entropy_with_grad(vz, targets, smoothing, ignore_index);
    if (nll_sum) *nll_sum = sum_all(f.out.nll).to(Device::cpu).item();
    const Tensor dlogits = f.dlogits;
    return make_result(sum_all(f.out.loss), "cross_entropy", {logits}, [dlogits](const Tensor& g) {
      return std::vector<Tensor>{affine(dlogits, g.to(Device::cpu).item(), 0.0)};
    });
  }
  CrossEntropyOutput f = cross_entropy_forward(vz, targets, smoothing, ignore_index);
  if (nll_sum) *nll_sum = sum_all(f.nll).to(Device::cpu).item();
  const Tensor lse = f.lse;
  return make_result(
      sum_all(f.loss), "cross_entropy", {logits}, [vz, targets, lse, smoothing, ignore_index](const Tensor& g) {
        // d(sum of rows)/d(row loss) = g for every row.
        Tensor per_row = full({vz.size(0)}, g.to(Device::cpu).item(),
                              vz.device() == Device::cpu ? vz.dtype() : DType::f32, vz.device());
        return std::vector<Tensor>{cross_entropy_backward(per_row, vz, targets, lse, smoothing, ignore_index)};
      });
}

Var cast(const Var& x, DType dtype) {
  if (x.value().dtype() == dtype) return x;
  const DType from = x.value().dtype();
  return make_result(kernels::cast(x.value(), dtype), "cast", {x},
                     [from](const Tensor& g) { return std::vector<Tensor>{kernels::cast(g, from)}; });
}

Var compute_copy(const Var& p, DType dtype) {
  const Tensor& copy = p.compute_copy();
  if (!copy.defined() || copy.dtype() != dtype) return cast(p, dtype);
  const DType from = p.value().dtype();
  return make_result(copy, "cast", {p},
                     [from](const Tensor& g) { return std::vector<Tensor>{kernels::cast(g, from)}; });
}

Var attention(const Var& q, const Var& k, const Var& v, const Tensor& key_padding, const AttentionOptions& opt) {
  const Tensor vq = q.value(), vk = k.value(), vv = v.value();
  AttentionOutput f = kernels::attention_forward(vq, vk, vv, key_padding, opt);
  return make_result(f.out, "attention", {q, k, v}, [vq, vk, vv, key_padding, f, opt](const Tensor& g) {
    AttentionGrads ag = kernels::attention_backward(g, vq, vk, vv, key_padding, f, opt);
    return std::vector<Tensor>{ag.dq, ag.dk, ag.dv};
  });
}

}  // namespace tessera::ag
