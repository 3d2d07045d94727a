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
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::mt19937_64 rng(splitmix64(opt_.seed ^ splitmix64(static_cast<std::uint64_t>(epoch_))));
  if (opt_.shuffle) fisher_yates(order, rng);

  plan_.clear();
  // Greedy cut of consecutive examples: a row joins the batch while rows * max(Ls, Lt) stays
  // within the budget; a longer example than the budget gets a batch of its own.
  auto cut = [&](std::vector<std::int64_t>::const_iterator first, std::vector<std::int64_t>::const_iterator last) {
    std::vector<std::int64_t> cur;
    std::int64_t width = 0;
    for (auto it = first; it != last; ++it) {
      const std::int64_t w = std::max({width, src_len(ex, *it), tgt_len(ex, *it)});
      if (!cur.empty() && (static_cast<std::int64_t>(cur.size()) + 1) * w > opt_.batch_tokens) {
        plan_.push_back(std::move(cur));
        cur.clear();
        width = std::max(src_len(ex, *it), tgt_len(ex, *it));
      } else {
        width = w;
      }
      cur.push_back(*it);
    }
    if (!cur.empty()) plan_.push_back(std::move(cur));
  };

  if (!opt_.shuffle) {
    cut(order.cbegin(), order.cend());
    return;
  }
  // Windows of about `window` batches' worth of tokens (by each example's max(Ls, Lt)), each
  // sorted stably by (source length, target length) and cut on its own.
  const std::int64_t window_tokens = opt_.window > std::numeric_limits<std::int64_t>::max() / opt_.batch_tokens
                                         ? std::numeric_limits<std::int64_t>::max()
                                         : opt_.window * opt_.batch_tokens;
  auto by_length = [&](std::int64_t a, std::int64_t b) {
    if (ex.src_size(a) != ex.src_size(b)) return ex.src_size(a) < ex.src_size(b);
    return ex.tgt_size(a) < ex.tgt_size(b);
  };
  std::size_t begin = 0;
  while (begin < order.size()) {
    std::size_t end = begin;
    std::int64_t tokens = 0;
    while (end < order.size() && tokens < window_tokens) {
      tokens += std::max(src_len(ex, order[end]), tgt_len(ex, order[end]));
      ++end;
    }
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last = order.begin() + static_cast<std::ptrdiff_t>(end);
    std::stable_sort(first, last, by_length);
    cut(first, last);
    begin = end;
  }
  fisher_yates(plan_, rng);
}

bool Batcher::next(Batch& out) {
  if (position_ >= static_cast<std::int64_t>(plan_.size())) {
    ++epoch_;
    position_ = 0;
    plan_epoch();
    return false;
  }
  out = make_batch(*examples_, plan_[static_cast<std::size_t>(position_)]);
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
