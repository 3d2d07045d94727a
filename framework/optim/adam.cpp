#include "optim/adam.h"

#include <cmath>

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
      T* w = p.value().data<T>();
      const T* g = p.grad().data<T>();
      T* m = m_[i].data<T>();
      T* v = v_[i].data<T>();
      const T b1 = static_cast<T>(opt_.beta1), b2 = static_cast<T>(opt_.beta2);
      const T step = static_cast<T>(lr / bc1), inv_bc2 = static_cast<T>(1.0 / bc2), eps = static_cast<T>(opt_.eps);
      const std::int64_t n = p.value().numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (std::int64_t j = 0; j < n; ++j) {
        m[j] = b1 * m[j] + (T(1) - b1) * g[j];
        v[j] = b2 * v[j] + (T(1) - b2) * g[j] * g[j];
        w[j] -= step * m[j] / (std::sqrt(v[j] * inv_bc2) + eps);
      }
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
                    "Adam::set_state: moment of '{}' has shape {}, the parameter {}", params_[i].name(),
                    shape_str(m->shape()), shape_str(params_[i].shape()));
  }
  t_ = steps;
  m_ = std::move(first_moments);
  v_ = std::move(second_moments);
}

void Adam::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

}  // namespace tessera::optim
