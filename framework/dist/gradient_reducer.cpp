#include "dist/gradient_reducer.h"

#include <chrono>

namespace tessera::dist {

GradientReducer::GradientReducer(std::vector<ag::Var> params, Communicator& group, std::size_t bucket_bytes,
                                 ReduceMode mode)
    : params_(std::move(params)), group_(group), mode_(mode) {
  std::size_t bytes = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const ag::Var& p = params_[k];
    if (buckets_.empty() || (bytes >= bucket_bytes && !buckets_.back().params.empty()) ||
        buckets_.back().flat.dtype() != p.value().dtype()) {
      buckets_.emplace_back();
      buckets_.back().flat = Tensor::empty({0}, p.value().dtype());
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bytes += p.value().nbytes();
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    for (std::size_t k : bucket.params) bucket.elements += params_[k].value().numel();
    // On the parameters' device: CUDA buckets travel over NCCL, CPU ones over MPI. Reduce-scattered
    // ones in equal blocks, their padding zero (it stays so: only sums and copies of zeros land there).
    const Device device = params_[bucket.params.front()].value().device();
    const std::int64_t block = (bucket.elements + group_.size() - 1) / group_.size();
    const bool scatter = mode_ == ReduceMode::reduce_scatter;
    bucket.flat = Tensor::zeros({scatter ? block * group_.size() : bucket.elements}, bucket.flat.dtype(), device);
    for (std::size_t k : bucket.params) params_[k].set_grad_ready_hook([this, b] { on_ready(b); });
  }
}

GradientReducer::~GradientReducer() {
  for (ag::Var& p : params_) p.set_grad_ready_hook(nullptr);
}

void GradientReducer::arm() {
  armed_ = true;
  next_ = 0;
  for (Bucket& b : buckets_) {
    b.ready = 0;
    b.request.reset();
  }
}

void GradientReducer::on_ready(std::size_t bucket) {
  if (!armed_) return;
  ++buckets_[bucket].ready;
  // Collectives must start in the same order on every rank, and backward does not finish the
  // buckets in their order everywhere (a pre-norm model's final layer norms; a rank with no
  // sentences runs no backward and starts them all in finish()): start each bucket once it and
  // every bucket before it are complete.
  while (next_ < buckets_.size() && buckets_[next_].ready == buckets_[next_].params.size()) launch(buckets_[next_++]);
  // Non-blocking MPI collectives advance only inside MPI calls: give the ones in flight a turn.
  for (Bucket& other : buckets_)
    if (other.request) other.request->test();
}

void GradientReducer::launch(Bucket& b) {
  if (b.request) return;
  std::int64_t offset = 0;
  for (std::size_t k : b.params) {
    ag::Var& p = params_[k];
    Tensor slot = b.flat.narrow_rows(offset, p.value().numel());
    if (p.grad().defined())
      slot.copy_from(p.grad().reshape({p.value().numel()}));
    else
      zero_bytes(slot.raw_data(), slot.device(), slot.nbytes());
    // Reduce-scattered, the whole gradient is needed no more: its memory goes back during backward.
    if (mode_ == ReduceMode::reduce_scatter) p.zero_grad();
    offset += p.value().numel();
  }
  b.request = mode_ == ReduceMode::reduce_scatter ? group_.reduce_scatter_async(b.flat, ReduceOp::sum)
                                                  : group_.all_reduce_async(b.flat, ReduceOp::sum);
}

double GradientReducer::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) launch(b);
  for (Bucket& b : buckets_) {
    b.request->wait();
    b.request.reset();
    if (mode_ == ReduceMode::reduce_scatter) continue;  // this rank's block of b.flat holds its sum
    std::int64_t offset = 0;
    for (std::size_t k : b.params) {
      ag::Var& p = params_[k];
      p.set_grad(b.flat.narrow_rows(offset, p.value().numel()).reshape(p.shape()).clone());
      offset += p.value().numel();
    }
  }
  armed_ = false;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tessera::dist
