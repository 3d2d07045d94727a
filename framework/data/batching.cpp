#include "data/batching.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "common/error.h"
#include "data/random.h"
#include "data/vocab.h"

namespace tessera::data {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <typename T>
void fisher_yates(std::vector<T>& v, std::mt19937_64& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(rng, i));
    std::swap(v[i - 1], v[j]);
  }
}

// Row lengths with the added eos (source) and bos/eos (target).
std::int64_t src_len(const ExampleSet& ex, std::int64_t i) { return ex.src_size(i) + 1; }
std::int64_t tgt_len(const ExampleSet& ex, std::int64_t i) { return ex.tgt_size(i) + 1; }

}  // namespace

double Batch::padding_fraction() const {
  if (padded_slots == 0) return 0.0;
  return 1.0 - static_cast<double>(src_tokens + tgt_tokens) / static_cast<double>(padded_slots);
}

Batch make_batch(const ExampleSet& examples, const std::vector<std::int64_t>& indices) {
  TESSERA_CHECK(!indices.empty(), "make_batch: no examples");
  const std::int64_t n = examples.size();
  std::int64_t ls = 0, lt = 0;
  for (const std::int64_t i : indices) {
    TESSERA_CHECK(i >= 0 && i < n, "make_batch: example index {} is outside [0, {})", i, n);
    ls = std::max(ls, src_len(examples, i));
    lt = std::max(lt, tgt_len(examples, i));
  }
  const auto rows = static_cast<std::int64_t>(indices.size());
  Batch b;
  b.src = Tensor::zeros({rows, ls}, DType::i32);
  b.src_padding = Tensor::zeros({rows, ls}, DType::i32);
  b.tgt_in = Tensor::zeros({rows, lt}, DType::i32);
  b.tgt_out = Tensor::zeros({rows, lt}, DType::i32);
  std::int32_t* src = b.src.data<std::int32_t>();
  std::int32_t* pad = b.src_padding.data<std::int32_t>();
  std::int32_t* tin = b.tgt_in.data<std::int32_t>();
  std::int32_t* tout = b.tgt_out.data<std::int32_t>();
  static_assert(kPadId == 0, "tensors start zero-filled, i.e. padded");
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t i = indices[r];
    const std::int64_t ns = examples.src_size(i), nt = examples.tgt_size(i);
    std::int32_t* s = src + r * ls;
    examples.copy_src(i, s);
    s[ns] = kEosId;
    std::fill(pad + r * ls + ns + 1, pad + (r + 1) * ls, 1);
    std::int32_t* ti = tin + r * lt;
    ti[0] = kBosId;
    examples.copy_tgt(i, ti + 1);
    std::int32_t* to = tout + r * lt;
    std::copy(ti + 1, ti + 1 + nt, to);
    to[nt] = kEosId;
    b.src_tokens += ns + 1;
    b.tgt_tokens += nt + 1;
  }
  b.indices = indices;
  b.padded_slots = rows * ls + rows * lt;
  return b;
}

Batcher::Batcher(const ExampleSet* examples, BatcherOptions opt) : examples_(examples), opt_(opt) {
  TESSERA_CHECK(examples_ != nullptr, "Batcher: no examples");
  TESSERA_CHECK(opt_.batch_tokens > 0, "Batcher: batch_tokens must be positive, got {}", opt_.batch_tokens);
  TESSERA_CHECK(opt_.window > 0, "Batcher: window must be positive, got {}", opt_.window);
  plan_epoch();
}

void Batcher::plan_epoch() {
  const ExampleSet& ex = *examples_;
  const std::int64_t n = ex.size();
  TESSERA_CHECK(n <= std::numeric_limits<std::uint32_t>::max(), "Batcher: {} pairs, over the 2^32 - 1 it orders", n);
  order_.resize(static_cast<std::size_t>(n));
  std::iota(order_.begin(), order_.end(), std::uint32_t{0});
  std::mt19937_64 rng(splitmix64(opt_.seed ^ splitmix64(static_cast<std::uint64_t>(epoch_))));
  if (opt_.shuffle) fisher_yates(order_, rng);

  plan_.clear();
  const auto count = static_cast<std::uint32_t>(n);
  if (!opt_.shuffle) {
    cut(0, count);
    plan_.shrink_to_fit();
    return;
  }
  // Windows of about `window` batches' worth of tokens (by each example's max(Ls, Lt)), each
  // sorted stably by (source length, target length) and cut on its own.
  const std::int64_t window_tokens = opt_.window > std::numeric_limits<std::int64_t>::max() / opt_.batch_tokens
                                         ? std::numeric_limits<std::int64_t>::max()
                                         : opt_.window * opt_.batch_tokens;
  auto by_length = [&](std::uint32_t a, std::uint32_t b) {
    if (ex.src_size(a) != ex.src_size(b)) return ex.src_size(a) < ex.src_size(b);
    return ex.tgt_size(a) < ex.tgt_size(b);
  };
  std::uint32_t begin = 0;
  while (begin < count) {
    std::uint32_t end = begin;
    std::int64_t tokens = 0;
    while (end < count && tokens < window_tokens) {
      tokens += std::max(src_len(ex, order_[end]), tgt_len(ex, order_[end]));
      ++end;
    }
    std::stable_sort(order_.begin() + begin, order_.begin() + end, by_length);
    cut(begin, end);
    begin = end;
  }
  plan_.shrink_to_fit();
  fisher_yates(plan_, rng);
}

// Greedy cut of order_[first, last): a row joins the batch while rows * max(Ls, Lt) stays within
// the budget; a longer example than the budget gets a batch of its own.
void Batcher::cut(std::uint32_t first, std::uint32_t last) {
  const ExampleSet& ex = *examples_;
  std::uint32_t start = first;
  std::int64_t width = 0;
  for (std::uint32_t at = first; at < last; ++at) {
    const std::int64_t own = std::max(src_len(ex, order_[at]), tgt_len(ex, order_[at]));
    const std::int64_t w = std::max(width, own);
    if (at > start && static_cast<std::int64_t>(at - start + 1) * w > opt_.batch_tokens) {
      plan_.push_back({start, at});
      start = at;
      width = own;
    } else {
      width = w;
    }
  }
  if (last > start) plan_.push_back({start, last});
}

bool Batcher::next(Batch& out) {
  if (position_ >= static_cast<std::int64_t>(plan_.size())) {
    ++epoch_;
    position_ = 0;
    plan_epoch();
    return false;
  }
  const Span batch = plan_[static_cast<std::size_t>(position_)];
  out = make_batch(*examples_, std::vector<std::int64_t>(order_.begin() + batch.begin, order_.begin() + batch.end));
  ++position_;
  return true;
}

void Batcher::seek(std::int64_t epoch, std::int64_t position) {
  TESSERA_CHECK(epoch >= 0, "Batcher::seek: epoch {} is negative", epoch);
  const std::int64_t old_epoch = epoch_;
  if (epoch != epoch_) {
    epoch_ = epoch;
    plan_epoch();
  }
  const auto count = static_cast<std::int64_t>(plan_.size());
  if (position < 0 || position > count) {
    if (epoch_ != old_epoch) {
      epoch_ = old_epoch;
      plan_epoch();
    }
    fail("Batcher::seek: position {} is outside [0, {}] for epoch {}", position, count, epoch);
  }
  position_ = position;
}

std::int64_t Batcher::batches_per_epoch() const { return static_cast<std::int64_t>(plan_.size()); }

}  // namespace tessera::data
