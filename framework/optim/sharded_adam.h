// ZeRO stage 1 (Rajbhandari et al., 2020): Adam with its moments sharded over the data-parallel
// ranks. A GradientReducer in reduce_scatter mode leaves each rank the summed gradient of its
// block of every bucket; this rank keeps the moments of those blocks only, updates the
// parameters' elements in them, and all-gathers every bucket so that each rank again holds every
// parameter. Adam works element by element, so each element gets the update whole Adam gives it.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/var.h"
#include "dist/gradient_reducer.h"
#include "optim/adam.h"

namespace tessera::optim {

class ShardedAdam {
 public:
  // `params`: the reducer's parameters, in the order it was given them; `reducer`: reduce_scatter
  // mode, over the data-parallel group (it outlives this).
  ShardedAdam(std::vector<ag::Var> params, dist::GradientReducer& reducer, AdamOptions opt);

  // Where a parameter's elements lie in this rank's block of a bucket.
  struct Piece {
    std::size_t bucket, param;  // param: index into params
    std::int64_t param_offset, block_offset, length;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  // The summed gradient of a piece: a view into this rank's block of the reducer's buffer (scaling
  // it scales that), valid from the reducer's finish() to step().
  Tensor gradient(const Piece& piece) const;

  // Adam on this rank's blocks at learning rate `lr`, the parameters updated in place and copied
  // into the block over their gradients; each bucket's all-gather starts once its block is
  // updated, while the next bucket's is. Collective over the data-parallel group.
  void step(double lr);
  long steps() const { return t_; }
  std::size_t state_bytes() const;  // this rank's moments

  // Per parameter, whole (every rank's blocks), on the CPU.
  struct Moments {
    std::vector<Tensor> first, second;
  };
  // Collective over the data-parallel group; only ranks with `keep` get the tensors (the others
  // hold one bucket at a time).
  Moments gather_moments(bool keep) const;
  // Takes this rank's blocks of whole moments (in params order, the parameters' shapes).
  void set_state(long steps, const std::vector<Tensor>& first, const std::vector<Tensor>& second);

 private:
  Tensor flat_param(std::size_t param) const;  // a parameter's value as one row
  // The kept compute copies (mixed precision) of a bucket's parameters, from its gathered values.
  void refresh_compute_copies(std::size_t bucket);

  std::vector<ag::Var> params_;
  dist::GradientReducer& reducer_;
  AdamOptions opt_;
  std::vector<std::int64_t> block_start_;  // per bucket: this rank's first element
  std::vector<Tensor> m_, v_;              // per bucket: this rank's real elements
  std::vector<Piece> pieces_;
  long t_ = 0;
};

}  // namespace tessera::optim
