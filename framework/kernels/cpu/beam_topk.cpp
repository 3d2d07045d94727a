#include "kernels/cpu/beam_topk.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/reduce.h"

namespace tessera::cpu {
namespace {

// A sentence's best candidates, best first, at most `count`, kept as (score, flat index) pairs in
// the output itself. Candidates arrive in ascending flat index, so one that only ties the last
// kept one ranks after it: only a higher score gets in.
class BestList {
 public:
  BestList(double* pairs, std::int64_t count) : pairs_(pairs), count_(count) {}
  bool full() const { return size_ == count_; }
  double worst() const { return pairs_[2 * (size_ - 1)]; }
  void offer(double score, std::int64_t index) {
    if (std::isnan(score) || (full() && !(score > worst()))) return;
    // From the back (the slot the worst leaves, or a new one), past every lower score.
    std::int64_t at = full() ? size_ - 1 : size_++;
    for (; at > 0 && pairs_[2 * (at - 1)] < score; --at) {
      pairs_[2 * at] = pairs_[2 * at - 2];
      pairs_[2 * at + 1] = pairs_[2 * at - 1];
    }
    pairs_[2 * at] = score;
    pairs_[2 * at + 1] = static_cast<double>(index);
  }
  // (-inf, -1) past the last candidate.
  void close() {
    for (std::int64_t c = size_; c < count_; ++c) {
      pairs_[2 * c] = -std::numeric_limits<double>::infinity();
      pairs_[2 * c + 1] = -1.0;
    }
  }

 private:
  double* pairs_;
  std::int64_t count_, size_ = 0;
};

constexpr std::int64_t kBlock = 64;

// A row's log-probabilities: the row itself, or of logits (x - max) - log_sum, as log_softmax
// computes them (the same float operations, so the same values).
struct RowLogProb {
  const float* row;
  float max = 0, log_sum = 0;
  bool logits = false;
  float operator()(std::int64_t v) const { return logits ? (row[v] - max) - log_sum : row[v]; }
};

// Offers logp(v) + base for v in [begin, end) but the never_output ids. Once the list is full, a
// block of kBlock ids whose largest log-probability cannot beat the worst kept one is skipped
// whole (base + x and logp are monotonic in x), so most of the vocabulary costs one vectorized max.
void offer_row(const RowLogProb& logp, double base, std::int64_t first_index, std::int64_t begin, std::int64_t end,
               const kernels::BeamTopKOptions& opt, BestList& best) {
  const auto offer = [&](std::int64_t v) {
    if (v != opt.never_output[0] && v != opt.never_output[1]) best.offer(base + logp(v), first_index + v);
  };
  const float* row = logp.row;
  std::int64_t v = begin;
  for (; v < end && !best.full(); ++v) offer(v);
  for (; v + kBlock <= end; v += kBlock) {
    float top = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : top)
    for (std::int64_t i = v; i < v + kBlock; ++i) top = std::max(top, row[i]);
    if (base + static_cast<double>(logp.logits ? (top - logp.max) - logp.log_sum : top) <= best.worst())
      continue;  // a NaN top falls through to the checks
    for (std::int64_t i = v; i < v + kBlock; ++i) offer(i);
  }
  for (; v < end; ++v) offer(v);
}

RowLogProb row_log_prob(const float* row, std::int64_t vocab, bool logits) {
  if (!logits) return {row};
  const auto [m, log_sum] = row_log_sum_exp(row, vocab);
  return {row, m, log_sum, true};
}

}  // namespace

Tensor beam_topk(const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only,
                 const kernels::BeamTopKOptions& opt) {
  const char* op = "beam_topk";
  check_cpu(op, logp);
  check_cpu(op, beam_scores);
  check_cpu(op, eos_only);
  kernels::check_beam_topk(op, logp, beam_scores, eos_only, opt);
  const std::int64_t sentences = logp.size(0) / opt.beam, vocab = logp.size(1);
  Tensor out = Tensor::empty({sentences, opt.count, 2}, DType::f64);
  const float* lp = logp.data<float>();
  const double* base = beam_scores.data<double>();
  const std::int32_t* only_eos = eos_only.data<std::int32_t>();
  double* o = out.data<double>();
#pragma omp parallel for schedule(dynamic, 4) if (sentences > 1)
  for (std::int64_t s = 0; s < sentences; ++s) {
    BestList best(o + s * opt.count * 2, opt.count);
    const bool eos = only_eos[s] != 0;
    for (std::int64_t j = 0; j < opt.beam && !(eos && opt.eos < 0); ++j) {
      const std::int64_t row = s * opt.beam + j;
      if (!(base[row] > -std::numeric_limits<double>::infinity())) continue;  // a dead row (or NaN)
      offer_row(row_log_prob(lp + row * vocab, vocab, opt.logits), base[row], j * vocab, eos ? opt.eos : 0,
                eos ? opt.eos + 1 : vocab, opt, best);
    }
    best.close();
  }
  return out;
}

}  // namespace tessera::cpu
