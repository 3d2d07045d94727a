#include "optim/adam.h"

#include "kernels/dispatch.h"

namespace tessera::optim {

Adam::Adam(std::vector<ag::Var> params, AdamOptions opt) : params_(std::move(params)), opt_(opt) {
  for (const auto& p : params_) {
    TESSERA_CHECK(p.requires_grad(), "Adam: parameter '{}' does not require a gradient", p.name());
    TESSERA_CHECK(p.value().device() == params_.front().value().device(),
                  "Adam: parameter '{}' is a {} tensor, '{}' a {} one (one device for all)", p.name(),
                  p.value().describe(), params_.front().name(), params_.front().value().describe());
    m_.push_back(Tensor::zeros(p.shape(), p.value().dtype(), p.value().device()));
    v_.push_back(Tensor::zeros(p.shape(), p.value().dtype(), p.value().device()));
  }
}

void Adam::step(double lr) {
  ++t_;
  // The parameters with a gradient, updated by the kernel of their device (one fused launch on the
  // GPU; the gradients are new tensors each step, so the small table is rebuilt each step).
  // A kept bfloat16 copy (mixed precision) is written by the same pass; another dtype's after it.
  std::vector<kernels::AdamParam> live;
  std::vector<ag::Var> recast;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    const Tensor& copy = params_[i].compute_copy();
    const bool fused = copy.defined() && copy.dtype() == DType::bf16;
    live.push_back({params_[i].value(), params_[i].grad(), m_[i], v_[i], fused ? copy : Tensor()});
    if (copy.defined() && !fused) recast.push_back(params_[i]);
  }
  kernels::adam_update(std::move(live), {lr, opt_.beta1, opt_.beta2, opt_.eps, t_});
  for (ag::Var& p : recast) p.refresh_compute_copy();
  zero_grad();
}

void Adam::set_state(long steps, std::vector<Tensor> first_moments, std::vector<Tensor> second_moments) {
  TESSERA_CHECK(steps >= 0, "Adam::set_state: negative step count {}", steps);
  TESSERA_CHECK(first_moments.size() == params_.size() && second_moments.size() == params_.size(),
                "Adam::set_state: {} and {} moments for {} parameters", first_moments.size(), second_moments.size(),
                params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (const Tensor* m : {&first_moments[i], &second_moments[i]})
      TESSERA_CHECK(m->shape() == params_[i].shape() && m->dtype() == params_[i].value().dtype(),
                    "Adam::set_state: moment of '{}' is {}, the parameter {}", params_[i].name(), m->describe(),
                    params_[i].value().describe());
  }
  t_ = steps;
  // Saved moments come from a file (CPU); they live where the parameters do.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    m_[i] = first_moments[i].to(params_[i].value().device());
    v_[i] = second_moments[i].to(params_[i].value().device());
  }
}

void Adam::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

}  // namespace tessera::optim
