// Data parallelism's gradient averaging, overlapped with backward: parameters are grouped into
// buckets (in reverse order, roughly the order backward finishes them); a bucket's non-blocking
// all-reduce starts as soon as its last gradient, and every earlier bucket's, is final, while
// backward goes on (every rank starts them in the same order, as collectives must be).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "autograd/var.h"
#include "dist/communicator.h"

namespace tessera::dist {

class GradientReducer {
 public:
  // Sums gradients over `group` (the loss is already normalized by the global token count, so
  // the sum is the single-process gradient). bucket_bytes: target size of one all-reduce.
  GradientReducer(std::vector<ag::Var> params, Communicator& group, std::size_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Call before the update's last backward: its finished buckets start reducing at once.
  void arm();
  // Starts what has not started (parameters without a gradient count as zeros), waits for all,
  // and writes the sums into the gradients. Returns the seconds spent waiting here.
  double finish();

  std::size_t buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    std::size_t ready = 0;
    Tensor flat;
    std::unique_ptr<Request> request;
  };
  void on_ready(std::size_t bucket);
  void launch(Bucket& b);

  std::vector<ag::Var> params_;
  Communicator& group_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;
  std::size_t next_ = 0;  // the first bucket not started yet (they start in index order)
};

}  // namespace tessera::dist
