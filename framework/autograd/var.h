// Hand-written reverse-mode autograd (after flashlight's Variable and micrograd's Value).
//
// A Var is a cheap handle to a Node: the value, the gradient (allocated on first use), the input
// nodes and the backward function of the op that made it. backward() orders the graph once with an
// iterative depth-first search (no recursion, so deep graphs cannot overflow the stack), runs the
// backward functions in reverse topological order, accumulates gradients, and frees the graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace tessera::ag {

// Given the gradient of an op's output, returns one gradient per input (undefined for inputs
// that need none), each with that input's shape.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out)>;

struct Node {
  Tensor value;
  Tensor grad;
  std::vector<std::shared_ptr<Node>> inputs;
  BackwardFn backward;
  std::string name;  // parameter name for leaves, op name otherwise
  bool requires_grad = false;
  bool is_leaf = true;
  std::uint64_t sequence = 0;  // ops: when it was made (backward runs the latest first)
  // Leaves: called by backward() once this leaf's gradient of that pass is complete (data
  // parallelism starts reducing a bucket as soon as all its gradients are final).
  std::function<void()> grad_ready;
  // Mixed precision: a parameter's value in the compute dtype, kept so that products use it
  // instead of casting the value at every call (ag::compute_copy); undefined: none kept.
  Tensor compute_copy;
};

class Var {
 public:
  Var() = default;
  // A leaf. Parameters are leaves that require a gradient and carry a dotted name.
  explicit Var(Tensor value, bool requires_grad = false, std::string name = "");
  static Var parameter(Tensor value, std::string name) { return Var(std::move(value), true, std::move(name)); }

  bool defined() const { return node_ != nullptr; }
  const Tensor& value() const;
  Tensor& value();
  const Tensor& grad() const;  // undefined until a backward reached this Var
  bool requires_grad() const { return node_ && node_->requires_grad; }
  bool is_leaf() const { return node_ && node_->is_leaf; }
  const std::string& name() const;
  const Shape& shape() const { return value().shape(); }

  // Backpropagates from this Var: a one-element output is seeded with 1, others need a seed.
  void backward();
  void backward(const Tensor& seed);
  void zero_grad();
  void set_grad(Tensor g);
  // Leaves: `fn` runs whenever a backward() pass has finished this Var's gradient (empty: none).
  void set_grad_ready_hook(std::function<void()> fn);
  // Leaves: keeps a copy of the value cast to `dtype` (mixed precision's bfloat16 weights). Whoever
  // changes the value refreshes the copy: optimizers write it with the update, loads re-cast it.
  void keep_compute_copy(DType dtype);
  void refresh_compute_copy();  // re-casts the value into the copy; no copy kept: nothing
  void drop_compute_copy();
  const Tensor& compute_copy() const;  // undefined when none is kept

  const std::shared_ptr<Node>& node() const { return node_; }
  explicit Var(std::shared_ptr<Node> node) : node_(std::move(node)) {}

 private:
  std::shared_ptr<Node> node_;
};

// While alive, ops record a graph (`enabled`) or not; the previous mode comes back after.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool saved_;
};
// While alive, ops record no graph (evaluation, decoding, optimizer updates).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};
bool grad_enabled();

// NaN check mode (Marian's --check-nan): every op checks its output and throws naming the
// first op whose output is not finite.
void set_check_nan(bool on);
bool check_nan_enabled();

// For op implementations: wraps an op's output value. Records the graph (inputs and backward)
// only when grad mode is on and some input requires a gradient.
Var make_result(Tensor value, const char* op, std::vector<Var> inputs, BackwardFn backward);

// For checkpoint(): backpropagates `seed` from `output` down to the nodes of `boundary` and no
// further. Their gradients accumulate (one contribution at a time, as a backward through them
// would add them), but their backward functions and gradient-ready hooks do not run: the pass
// they belong to runs those. A leaf that needs a gradient and is not in `boundary` is an error.
void backward_to(const Var& output, const Tensor& seed, const std::vector<Var>& boundary);

}  // namespace tessera::ag
