#include "optim/adam.h"

#include <cmath>

#include "kernels/cpu/adam.h"

namespace tessera::optim {

Adam::Adam(std::vector<ag::Var> params, AdamOptions opt) : params_(std::move(params)), opt_(opt) {
  for (const auto& p : params_) {
    TESSERA_CHECK(p.requires_grad(), "Adam: parameter '{}' does not require a gradient", p.name());
    m_.push_back(Tensor::zeros(p.shape(), p.value().dtype()));
    v_.push_back(Tensor::zeros(p.shape(), p.value().dtype()));
  }
}

void Adam::step(double lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(t_));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    ag::Var& p = params_[i];
    if (!p.grad().defined()) continue;
    dispatch_float("Adam::step", p.value().dtype(), [&]<typename T>() {
      const cpu::AdamHyper<T> h{static_cast<T>(opt_.beta1), static_cast<T>(opt_.beta2), static_cast<T>(lr / bc1),
                                static_cast<T>(1.0 / bc2), static_cast<T>(opt_.eps)};
      cpu::adam_update(p.value().data<T>(), p.grad().data<T>(), m_[i].data<T>(), v_[i].data<T>(), p.value().numel(), h);
    });
  }
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
  m_ = std::move(first_moments);
  v_ = std::move(second_moments);
}

void Adam::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

}  // namespace tessera::optim
