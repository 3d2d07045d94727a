#include "autograd/var.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "kernels/dispatch.h"

namespace tessera::ag {
namespace {
thread_local bool g_grad_enabled = true;
bool g_check_nan = false;
std::atomic<std::uint64_t> g_next_sequence{1};  // ops' creation order (see Node::sequence)

void accumulate(Node& n, const Tensor& grad) {
  TESSERA_CHECK(grad.shape() == n.value.shape(), "backward: gradient {} for '{}' does not match its value {}",
                shape_str(grad.shape()), n.name, shape_str(n.value.shape()));
  // A gradient has its value's dtype (mixed precision: a float32 master weight's gradient may
  // arrive in bfloat16 from the op that used its bfloat16 copy).
  const Tensor g = kernels::cast(grad, n.value.dtype());
  // Held by nobody but `grad` and `g` (a consumer's fresh result): no other tensor sees a change.
  const bool g_private = g.storage_users() == (g.raw_data() == grad.raw_data() ? 2 : 1);
  if (!n.grad.defined()) {
    // Leaves own their gradient (optimizers and clipping change it in place); an intermediate
    // may share the tensor its consumer produced: it is added to in place only once it alone
    // holds it.
    n.grad = n.is_leaf && !g_private ? g.clone() : g;
  } else if (n.is_leaf || n.grad.storage_users() == 1) {
    kernels::add_inplace(n.grad, g);  // an intermediate's own gradient too: no new tensor
  } else {
    n.grad = kernels::add(n.grad, g);
  }
}

void check_finite(const Tensor& value, const char* op) {
  if (value.dtype() == DType::i32) return;
  const Tensor t = value.to(Device::cpu);
  const auto v = t.to_doubles();
  for (std::size_t i = 0; i < v.size(); ++i) {
    TESSERA_CHECK(std::isfinite(v[i]), "check-nan: op '{}' produced {} at flat index {} of its output {}", op,
                  std::isnan(v[i]) ? "NaN" : (v[i] > 0 ? "+inf" : "-inf"), i, value.describe());
  }
}

// The nodes a checkpoint's inner backward stops at (its inputs); null for a whole backward.
using Boundary = std::unordered_set<const Node*>;

// The ops of the graph below `root` in the order backward runs them (the latest first), owned
// here (clearing a node's inputs must not free one not yet run), and for every node how many
// edges lead into it. Nodes of `boundary` end the walk like leaves.
std::vector<std::shared_ptr<Node>> ops_below(const std::shared_ptr<Node>& root, const Boundary* boundary,
                                             std::unordered_map<const Node*, std::size_t>& consumers) {
  std::vector<std::shared_ptr<Node>> ops;
  consumers = {{root.get(), 0}};
  const auto stops_at = [boundary](const Node* n) { return boundary != nullptr && boundary->count(n) > 0; };
  std::vector<std::shared_ptr<Node>> stack;
  if (!stops_at(root.get())) stack.push_back(root);  // a function that returns one of its inputs
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    // An op whose backward already ran has freed what it saved: its gradient would be lost silently.
    TESSERA_CHECK(n->is_leaf || n->backward,
                  "backward: '{}' was already passed through by an earlier backward, which freed its graph; run the "
                  "forward again",
                  n->name);
    // A leaf a checkpointed function reads unannounced would get its gradient-ready hook from the
    // inner pass, before the rest of the graph has added its part.
    TESSERA_CHECK(!n->is_leaf || boundary == nullptr,
                  "checkpoint: the function reads '{}', which needs a gradient, but it is not among the checkpoint's "
                  "inputs (list every parameter the function uses)",
                  n->name);
    for (const auto& in : n->inputs) {
      if (!in->requires_grad) continue;
      auto [it, first_time] = consumers.try_emplace(in.get(), 0);
      ++it->second;
      if (first_time && !stops_at(in.get())) stack.push_back(in);
    }
    if (!n->is_leaf) ops.push_back(std::move(n));
  }
  // Latest first: creation order is a topological order (inputs exist before their outputs), and
  // unlike a depth-first order it runs backward through the model layer by layer in reverse, so
  // the parameters' gradients become final in the reverse of their creation order (which the
  // data-parallel gradient buckets rely on) and each layer's activations are freed in turn.
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a->sequence > b->sequence; });
  return ops;
}

// Runs backward from `root` seeded with `seed`, down to the leaves or to the nodes of `boundary`.
void backpropagate(const std::shared_ptr<Node>& root, const Tensor& seed, const Boundary* boundary) {
  std::unordered_map<const Node*, std::size_t> consumers;
  std::vector<std::shared_ptr<Node>> ops = ops_below(root, boundary, consumers);
  const auto owns_hook = [boundary](const Node& n) {
    return n.is_leaf && n.grad_ready && (boundary == nullptr || boundary->count(&n) == 0);
  };
  accumulate(*root, seed.to(root->value.device()));
  if (owns_hook(*root)) root->grad_ready();
  for (std::shared_ptr<Node>& op : ops) {
    Node& n = *op;
    std::vector<Tensor> grads;
    if (n.grad.defined() && n.backward) grads = n.backward(n.grad);
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      Node& in = *n.inputs[i];
      if (!in.requires_grad) continue;
      if (i < grads.size() && grads[i].defined()) accumulate(in, grads[i]);
      // A leaf's gradient is final once every consumer has passed it its part.
      if (--consumers[&in] == 0 && owns_hook(in) && in.grad.defined()) in.grad_ready();
    }
    // Free the graph: captured tensors, links to inputs, and the intermediate gradient.
    n.backward = nullptr;
    n.inputs.clear();
    n.grad = Tensor();
    op.reset();
  }
}
}  // namespace

Var::Var(Tensor value, bool requires_grad, std::string name) : node_(std::make_shared<Node>()) {
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
  node_->name = std::move(name);
}

const Tensor& Var::value() const {
  TESSERA_CHECK(node_, "Var::value: undefined Var");
  return node_->value;
}
Tensor& Var::value() {
  TESSERA_CHECK(node_, "Var::value: undefined Var");
  return node_->value;
}
const Tensor& Var::grad() const {
  TESSERA_CHECK(node_, "Var::grad: undefined Var");
  return node_->grad;
}
const std::string& Var::name() const {
  TESSERA_CHECK(node_, "Var::name: undefined Var");
  return node_->name;
}
void Var::zero_grad() {
  if (node_) node_->grad = Tensor();
}
void Var::set_grad(Tensor g) {
  TESSERA_CHECK(node_, "Var::set_grad: undefined Var");
  TESSERA_CHECK(g.shape() == node_->value.shape(), "Var::set_grad: gradient {} does not match '{}' of shape {}",
                shape_str(g.shape()), node_->name, shape_str(node_->value.shape()));
  node_->grad = std::move(g);
}

void Var::keep_compute_copy(DType dtype) {
  TESSERA_CHECK(node_ && node_->is_leaf, "keep_compute_copy: '{}' is not a leaf", node_ ? node_->name : "undefined");
  node_->compute_copy = kernels::cast(node_->value, dtype);
}

void Var::refresh_compute_copy() {
  if (node_ && node_->compute_copy.defined())
    node_->compute_copy.copy_from(kernels::cast(node_->value, node_->compute_copy.dtype()));
}

void Var::drop_compute_copy() {
  if (node_) node_->compute_copy = Tensor();
}

const Tensor& Var::compute_copy() const {
  TESSERA_CHECK(node_, "Var::compute_copy: undefined Var");
  return node_->compute_copy;
}

void Var::set_grad_ready_hook(std::function<void()> fn) {
  TESSERA_CHECK(node_ && node_->is_leaf, "set_grad_ready_hook: '{}' is not a leaf", node_ ? node_->name : "undefined");
  node_->grad_ready = std::move(fn);
}

void Var::backward() {
  TESSERA_CHECK(value().numel() == 1, "backward: output '{}' has shape {}; give a seed gradient for non-scalars",
                name(), shape_str(value().shape()));
  backward(kernels::full(value().shape(), 1.0, value().dtype(), value().device()));
}

void Var::backward(const Tensor& seed) {
  TESSERA_CHECK(node_ && node_->requires_grad, "backward: '{}' does not require a gradient (no parameter reached it)",
                node_ ? node_->name : std::string("undefined"));
  backpropagate(node_, seed, nullptr);
}

void backward_to(const Var& output, const Tensor& seed, const std::vector<Var>& boundary) {
  TESSERA_CHECK(output.requires_grad(), "checkpoint: the recomputed output '{}' does not require a gradient",
                output.defined() ? output.name() : std::string("undefined"));
  Boundary nodes;
  for (const Var& v : boundary) nodes.insert(v.node().get());
  backpropagate(output.node(), seed, &nodes);
}

GradModeGuard::GradModeGuard(bool enabled) : saved_(g_grad_enabled) { g_grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { g_grad_enabled = saved_; }
bool grad_enabled() { return g_grad_enabled; }

void set_check_nan(bool on) { g_check_nan = on; }
bool check_nan_enabled() { return g_check_nan; }

Var make_result(Tensor value, const char* op, std::vector<Var> inputs, BackwardFn backward) {
  if (g_check_nan) check_finite(value, op);
  auto node = std::make_shared<Node>();
  node->value = std::move(value);
  node->name = op;
  node->is_leaf = false;
  node->sequence = g_next_sequence.fetch_add(1, std::memory_order_relaxed);
  bool needs = false;
  for (const auto& v : inputs) needs = needs || v.requires_grad();
  if (needs && g_grad_enabled) {
    node->requires_grad = true;
    node->backward = std::move(backward);
    node->inputs.reserve(inputs.size());
    for (auto& v : inputs) node->inputs.push_back(v.node());
  }
  return Var(std::move(node));
}

}  // namespace tessera::ag
