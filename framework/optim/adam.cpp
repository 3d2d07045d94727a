#include "optim/adam.h"

#include <cmath>

#include "kernels/cpu/adam.h"
#ifdef TESSERA_WITH_CUDA
#include "kernels/cuda/adam.h"
#endif

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
  if (!params_.empty() && params_.front().value().device() == Device::cuda) {
    step_on_gpu(lr);
    zero_grad();
    return;
  }
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

void Adam::step_on_gpu(double lr) {
#ifdef TESSERA_WITH_CUDA
  // One fused launch over every parameter with a gradient (the gradients are new tensors each
  // step, so the small pointer table is rebuilt each step).
  std::vector<cuda::AdamParam> live;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) live.push_back({params_[i].value(), params_[i].grad(), m_[i], v_[i], Tensor()});
  if (!live.empty()) cuda::FusedAdam(std::move(live)).step(lr, opt_.beta1, opt_.beta2, opt_.eps, t_);
#else
  (void)lr;
  fail("Adam: CUDA parameters, but this build of Tessera has no CUDA support");
#endif
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
