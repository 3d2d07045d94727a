// Data parallelism's gradient averaging, overlapped with backward: parameters are grouped into
// buckets (in reverse order, roughly the order backward finishes them); a bucket's non-blocking
// all-reduce starts as soon as its last gradient, and every earlier bucket's, is final, while
// backward goes on (every rank starts them in the same order, as collectives must be). Under
// ZeRO-1 each bucket is reduce-scattered instead: a rank keeps the sum of its block only.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "autograd/var.h"
#include "dist/communicator.h"

namespace tessera::dist {

// all_reduce: every rank gets the summed gradients. reduce_scatter: each bucket is padded to size()
// equal blocks and rank r gets the sum of block r only, in its block of buffer(); the parameters'
// gradients are dropped once copied into the bucket.
enum class ReduceMode { all_reduce, reduce_scatter };

class GradientReducer {
 public:
  // Sums gradients over `group` (the loss is already normalized by the global token count, so
  // the sum is the single-process gradient). bucket_bytes: target size of one all-reduce.
  GradientReducer(std::vector<ag::Var> params, Communicator& group, std::size_t bucket_bytes,
                  ReduceMode mode = ReduceMode::all_reduce);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Call before the update's last backward: its finished buckets start reducing at once.
  void arm();
  // Starts what has not started (parameters without a gradient count as zeros), waits for all,
  // and writes the sums into the gradients. Returns the seconds spent waiting here.
  double finish();

  std::size_t buckets() const { return buckets_.size(); }
  // Bucket b's parameters (indices into the constructor's list, in their order in it) and
  // elements (without padding).
  const std::vector<std::size_t>& bucket_params(std::size_t b) const { return buckets_[b].params; }
  std::int64_t bucket_elements(std::size_t b) const { return buckets_[b].elements; }
  // reduce_scatter: the bucket's whole buffer, size() equal blocks (zero padding after the
  // parameters). After finish() this rank's block holds its gradient sum; between finish() and
  // the next arm() the caller may use the buffer.
  Tensor& buffer(std::size_t b) { return buckets_[b].flat; }
  const Tensor& buffer(std::size_t b) const { return buckets_[b].flat; }
  Communicator& group() const { return group_; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    std::size_t ready = 0;
    std::int64_t elements = 0;  // of the parameters; flat may hold padding after them
    Tensor flat;
    std::unique_ptr<Request> request;
  };
  void on_ready(std::size_t bucket);
  void launch(Bucket& b);

  std::vector<ag::Var> params_;
  Communicator& group_;
  ReduceMode mode_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;
  std::size_t next_ = 0;  // the first bucket not started yet (they start in index order)
};

}  // namespace tessera::dist
