#include "optim/sharded_adam.h"

#include <algorithm>
#include <memory>

#include "kernels/dispatch.h"

namespace tessera::optim {

ShardedAdam::ShardedAdam(std::vector<ag::Var> params, dist::GradientReducer& reducer, AdamOptions opt)
    : params_(std::move(params)), reducer_(reducer), opt_(opt) {
  const int rank = reducer_.group().rank();
  for (std::size_t b = 0; b < reducer_.buckets(); ++b) {
    const Tensor& buffer = reducer_.buffer(b);
    const std::int64_t block = buffer.numel() / reducer_.group().size();
    const std::int64_t lo = block * rank, hi = std::max(lo, std::min(lo + block, reducer_.bucket_elements(b)));
    block_start_.push_back(lo);
    m_.push_back(Tensor::zeros({hi - lo}, buffer.dtype(), buffer.device()));
    v_.push_back(Tensor::zeros({hi - lo}, buffer.dtype(), buffer.device()));
    // The parameters' element ranges that meet [lo, hi).
    std::int64_t offset = 0;
    for (std::size_t k : reducer_.bucket_params(b)) {
      const std::int64_t n = params_[k].value().numel();
      const std::int64_t from = std::max(offset, lo), to = std::min(offset + n, hi);
      if (from < to) pieces_.push_back({b, k, from - offset, from - lo, to - from});
      offset += n;
    }
  }
}

Tensor ShardedAdam::flat_param(std::size_t param) const {
  return params_[param].value().reshape({params_[param].value().numel()});
}

Tensor ShardedAdam::gradient(const Piece& piece) const {
  return reducer_.buffer(piece.bucket).narrow_rows(block_start_[piece.bucket] + piece.block_offset, piece.length);
}

void ShardedAdam::step(double lr) {
  ++t_;
  dist::Communicator& group = reducer_.group();
  std::vector<std::unique_ptr<dist::Request>> gathers(reducer_.buckets());
  for (std::size_t b = 0, first = 0; b < reducer_.buckets(); ++b) {
    std::size_t end = first;
    while (end < pieces_.size() && pieces_[end].bucket == b) ++end;
    // The parameters' elements in this rank's block, updated where they are.
    std::vector<kernels::AdamParam> live;
    for (std::size_t i = first; i < end; ++i) {
      const Piece& p = pieces_[i];
      live.push_back({flat_param(p.param).narrow_rows(p.param_offset, p.length), gradient(p),
                      m_[b].narrow_rows(p.block_offset, p.length), v_[b].narrow_rows(p.block_offset, p.length),
                      Tensor()});
    }
    kernels::adam_update(live, {lr, opt_.beta1, opt_.beta2, opt_.eps, t_});
    // Then into the block in place of their gradients, and to every rank.
    for (std::size_t i = first; i < end; ++i) gradient(pieces_[i]).copy_from(live[i - first].weight);
    gathers[b] = group.all_gather_async(reducer_.buffer(b));
    for (std::size_t earlier = 0; earlier < b; ++earlier) gathers[earlier]->test();  // MPI progresses in calls
    first = end;
  }
  // Every rank's updated blocks back into the parameters.
  for (std::size_t b = 0; b < reducer_.buckets(); ++b) {
    gathers[b]->wait();
    std::int64_t offset = 0;
    for (std::size_t k : reducer_.bucket_params(b)) {
      const std::int64_t n = params_[k].value().numel();
      flat_param(k).copy_from(reducer_.buffer(b).narrow_rows(offset, n));
      offset += n;
    }
    refresh_compute_copies(b);
  }
}

void ShardedAdam::refresh_compute_copies(std::size_t bucket) {
  const std::vector<std::size_t>& in_bucket = reducer_.bucket_params(bucket);
  const auto kept = std::find_if(in_bucket.begin(), in_bucket.end(),
                                 [&](std::size_t k) { return params_[k].compute_copy().defined(); });
  if (kept == in_bucket.end()) return;
  // One cast of the gathered bucket (every rank's updated elements), sliced into the copies.
  const Tensor low = kernels::cast(reducer_.buffer(bucket).narrow_rows(0, reducer_.bucket_elements(bucket)),
                                   params_[*kept].compute_copy().dtype());
  std::int64_t offset = 0;
  for (std::size_t k : in_bucket) {
    const std::int64_t n = params_[k].value().numel();
    Tensor copy = params_[k].compute_copy();
    if (copy.defined()) copy.copy_from(kernels::cast(low.narrow_rows(offset, n), copy.dtype()).reshape(copy.shape()));
    offset += n;
  }
}

std::size_t ShardedAdam::state_bytes() const {
  std::size_t bytes = 0;
  for (std::size_t b = 0; b < m_.size(); ++b) bytes += m_[b].nbytes() + v_[b].nbytes();
  return bytes;
}

ShardedAdam::Moments ShardedAdam::gather_moments(bool keep) const {
  Moments out;
  if (keep) {
    out.first.resize(params_.size());
    out.second.resize(params_.size());
  }
  for (std::size_t b = 0; b < reducer_.buckets(); ++b) {
    const Tensor& buffer = reducer_.buffer(b);
    for (const auto& [mine, whole] : {std::pair{&m_[b], &out.first}, std::pair{&v_[b], &out.second}}) {
      Tensor all = Tensor::zeros(buffer.shape(), buffer.dtype(), buffer.device());
      all.narrow_rows(block_start_[b], mine->numel()).copy_from(*mine);
      reducer_.group().all_gather_async(all)->wait();
      if (!keep) continue;
      std::int64_t offset = 0;
      for (std::size_t k : reducer_.bucket_params(b)) {
        const std::int64_t n = params_[k].value().numel();
        const Tensor part = all.narrow_rows(offset, n).reshape(params_[k].shape());
        (*whole)[k] = part.device() == Device::cpu ? part.clone() : part.to(Device::cpu);
        offset += n;
      }
    }
  }
  return out;
}

void ShardedAdam::set_state(long steps, const std::vector<Tensor>& first, const std::vector<Tensor>& second) {
  TESSERA_CHECK(steps >= 0, "ShardedAdam::set_state: negative step count {}", steps);
  TESSERA_CHECK(first.size() == params_.size() && second.size() == params_.size(),
                "ShardedAdam::set_state: {} and {} moments for {} parameters", first.size(), second.size(),
                params_.size());
  for (std::size_t k = 0; k < params_.size(); ++k)
    for (const Tensor* m : {&first[k], &second[k]})
      TESSERA_CHECK(m->shape() == params_[k].shape() && m->dtype() == params_[k].value().dtype(),
                    "ShardedAdam::set_state: moment of '{}' is {}, the parameter {}", params_[k].name(), m->describe(),
                    params_[k].value().describe());
  t_ = steps;
  for (const Piece& p : pieces_) {
    const auto take = [&](const Tensor& whole) {
      return whole.reshape({whole.numel()}).narrow_rows(p.param_offset, p.length);
    };
    m_[p.bucket].narrow_rows(p.block_offset, p.length).copy_from(take(first[p.param]));
    v_[p.bucket].narrow_rows(p.block_offset, p.length).copy_from(take(second[p.param]));
  }
}

}  // namespace tessera::optim
