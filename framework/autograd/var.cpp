#include "autograd/var.h"

#include <cmath>
#include <unordered_set>

#include "kernels/dispatch.h"

namespace tessera::ag {
namespace {
thread_local bool g_grad_enabled = true;
bool g_check_nan = false;

void accumulate(Node& n, const Tensor& grad) {
  TESSERA_CHECK(grad.shape() == n.value.shape(), "backward: gradient {} for '{}' does not match its value {}",
                shape_str(grad.shape()), n.name, shape_str(n.value.shape()));
  // A gradient has its value's dtype (mixed precision: a float32 master weight's gradient may
  // arrive in bfloat16 from the op that used its bfloat16 copy).
  const Tensor g = kernels::cast(grad, n.value.dtype());
  if (!n.grad.defined()) {
    // Leaves own their gradient (optimizers and clipping change it in place); an intermediate
    // may share the tensor its consumer produced, since nobody writes to it.
    n.grad = n.is_leaf && g.raw_data() == grad.raw_data() ? g.clone() : g;
  } else if (n.is_leaf) {
    kernels::add_inplace(n.grad, g);
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
  // Iterative post-order DFS gives a topological order (inputs before outputs). The order
  // holds owning pointers: clearing a node's inputs below must not free a node not yet visited.
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> visited;
  std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack{{node_, 0}};
  visited.insert(node_.get());
  while (!stack.empty()) {
    auto& top = stack.back();
    if (top.second < top.first->inputs.size()) {
      std::shared_ptr<Node> child = top.first->inputs[top.second++];
      if (child->requires_grad && visited.insert(child.get()).second) stack.emplace_back(std::move(child), 0);
    } else {
      order.push_back(std::move(top.first));
      stack.pop_back();
    }
  }
  accumulate(*node_, seed.to(node_->value.device()));
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node& n = **it;
    if (n.is_leaf) {
      // Reverse topological order: every consumer of this leaf has already passed it its part.
      if (n.grad_ready && n.grad.defined()) n.grad_ready();
    } else {
      if (n.grad.defined() && n.backward) {
        const std::vector<Tensor> grads = n.backward(n.grad);
        for (std::size_t i = 0; i < n.inputs.size() && i < grads.size(); ++i) {
          Node& in = *n.inputs[i];
          if (in.requires_grad && grads[i].defined()) accumulate(in, grads[i]);
        }
      }
      // Free the graph: captured tensors, links to inputs, and the intermediate gradient.
      n.backward = nullptr;
      n.inputs.clear();
      n.grad = Tensor();
    }
    it->reset();
  }
}

NoGradGuard::NoGradGuard() : saved_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = saved_; }
bool grad_enabled() { return g_grad_enabled; }

void set_check_nan(bool on) { g_check_nan = on; }
bool check_nan_enabled() { return g_check_nan; }

Var make_result(Tensor value, const char* op, std::vector<Var> inputs, BackwardFn backward) {
  if (g_check_nan) check_finite(value, op);
  auto node = std::make_shared<Node>();
  node->value = std::move(value);
  node->name = op;
  node->is_leaf = false;
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
