// Adam (Kingma & Ba) over named parameters, with the paper's Transformer defaults available.
// Parameters on the GPU are updated by one fused kernel (kernels::adam_update), bit-identical to
// the CPU update in float32.
#pragma once

#include <vector>

#include "autograd/var.h"

namespace tessera::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-9;
};

class Adam {
 public:
  Adam(std::vector<ag::Var> params, AdamOptions opt);
  // One update with learning rate `lr` (schedules set it per step); parameters without a
  // gradient are skipped. Clears the gradients afterwards.
  void step(double lr);
  void step() { step(opt_.lr); }
  void zero_grad();
  long steps() const { return t_; }
  const std::vector<ag::Var>& params() const { return params_; }
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }
  // Restores a saved state: t and the moments, in params() order with the parameters' shapes.
  void set_state(long steps, std::vector<Tensor> first_moments, std::vector<Tensor> second_moments);

 private:
  std::vector<ag::Var> params_;
  std::vector<Tensor> m_, v_;
  AdamOptions opt_;
  long t_ = 0;
};

}  // namespace tessera::optim
