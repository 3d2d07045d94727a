#include "nn/feed_forward.h"

#include "autograd/ops.h"

namespace tessera::nn {

FeedForward::FeedForward(const std::string& prefix, std::int64_t d_model, std::int64_t d_ff, std::uint64_t& next_seed,
                         const Placement& placement)
    : fc1_(prefix + ".fc1", d_model, d_ff, next_seed++, placement),
      fc2_(prefix + ".fc2", d_ff, d_model, next_seed++, placement) {}

ag::Var FeedForward::operator()(const ag::Var& x) const { return fc2_(fc1_.forward_relu(x)); }

std::vector<Parameter> FeedForward::parameters() const {
  std::vector<Parameter> all = fc1_.parameters();
  append(all, fc2_.parameters());
  return all;
}

}  // namespace tessera::nn
