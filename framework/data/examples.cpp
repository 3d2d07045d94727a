#include "data/examples.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "common/error.h"

namespace tessera::data {

template <typename T>
void ExampleSet::Chunked<T>::push_back(T value) {
  if ((size_ & (kChunk - 1)) == 0) chunks_.emplace_back();
  std::vector<T>& chunk = chunks_.back();
  // A chunk grows by doubling up to exactly kChunk (a power of two), so full chunks hold no spare,
  // also after shrink_to_fit left one at an odd size.
  if (chunk.size() == chunk.capacity())
    chunk.reserve(static_cast<std::size_t>(
        std::min<std::int64_t>(kChunk, std::max<std::int64_t>(16, 2 * static_cast<std::int64_t>(chunk.capacity())))));
  chunk.push_back(value);
  ++size_;
}

template <typename T>
void ExampleSet::Chunked<T>::truncate(std::int64_t n) {
  if (n >= size_) return;
  chunks_.resize(static_cast<std::size_t>((n + kChunk - 1) >> kChunkBits));
  if (!chunks_.empty()) chunks_.back().resize(static_cast<std::size_t>(n - ((n - 1) & ~(kChunk - 1))));
  size_ = n;
}

template <typename T>
template <typename Out>
void ExampleSet::Chunked<T>::copy(std::int64_t begin, std::int64_t end, Out* out) const {
  while (begin < end) {
    const std::vector<T>& chunk = chunks_[static_cast<std::size_t>(begin >> kChunkBits)];
    const std::int64_t at = begin & (kChunk - 1), n = std::min(end - begin, kChunk - at);
    out = std::copy(chunk.begin() + at, chunk.begin() + at + n, out);
    begin += n;
  }
}

template <typename T>
std::int64_t ExampleSet::Chunked<T>::bytes() const {
  std::int64_t total = 0;
  for (const std::vector<T>& c : chunks_) total += static_cast<std::int64_t>(c.capacity() * sizeof(T));
  return total;
}

template <typename T>
void ExampleSet::Chunked<T>::shrink_to_fit() {
  if (!chunks_.empty()) chunks_.back().shrink_to_fit();
  chunks_.shrink_to_fit();
}

ExampleSet::ExampleSet(std::initializer_list<Example> examples) {
  for (const Example& e : examples) add(e);
}

ExampleSet::ExampleSet(const std::vector<Example>& examples) {
  for (const Example& e : examples) add(e);
  shrink_to_fit();
}

ExampleSet ExampleSet::in_place(std::shared_ptr<const void> owner, const std::int64_t* ends, std::int64_t pairs,
                                const void* ids, bool wide) {
  TESSERA_CHECK(owner != nullptr && pairs >= 0, "ExampleSet::in_place: no owner, or {} pairs", pairs);
  ExampleSet set;
  set.owner_ = std::move(owner);
  set.in_place_ends_ = ends;
  set.in_place_pairs_ = pairs;
  set.in_place_ids_ = ids;
  set.wide_ids_ = wide;
  return set;
}

void ExampleSet::add(std::span<const std::int32_t> src, std::span<const std::int32_t> tgt) {
  TESSERA_CHECK(!owner_, "ExampleSet: a set read in place (a mapped file) is read-only");
  bool fits_narrow = true;
  for (const auto side : {src, tgt}) {
    for (const std::int32_t id : side) {
      TESSERA_CHECK(id >= 0, "ExampleSet: token id {} is negative (pair {})", id, size());
      fits_narrow = fits_narrow && id <= std::numeric_limits<std::uint16_t>::max();
    }
  }
  if (!fits_narrow && !wide_ids_) widen();
  // Out of memory half-way: back to the pairs there were, so the set stays consistent.
  const std::int64_t ends = ends_.size(), ids_before = ids();
  try {
    for (const auto side : {src, tgt}) {
      for (const std::int32_t id : side) {
        if (wide_ids_) {
          wide_.push_back(id);
        } else {
          narrow_.push_back(static_cast<std::uint16_t>(id));
        }
      }
      ends_.push_back(ids() + static_cast<std::int64_t>(side.size()));
    }
  } catch (...) {
    ends_.truncate(ends);
    wide_.truncate(wide_ids_ ? ids_before : 0);
    narrow_.truncate(wide_ids_ ? 0 : ids_before);
    throw;
  }
}

// The wide copy is built whole before the narrow ids go (both are held once, for a moment): out
// of memory half-way leaves the set as it was.
void ExampleSet::widen() {
  Chunked<std::int32_t> wide;
  for (const std::vector<std::uint16_t>& chunk : narrow_.chunks_)
    for (const std::uint16_t id : chunk) wide.push_back(id);
  wide_ = std::move(wide);
  narrow_ = {};
  wide_ids_ = true;
}

void ExampleSet::copy_ids(std::int64_t begin, std::int64_t end, std::int32_t* out) const {
  if (owner_ && wide_ids_) {
    const auto* ids = static_cast<const std::int32_t*>(in_place_ids_);
    std::copy(ids + begin, ids + end, out);
  } else if (owner_) {
    const auto* ids = static_cast<const std::uint16_t*>(in_place_ids_);
    std::copy(ids + begin, ids + end, out);
  } else if (wide_ids_) {
    wide_.copy(begin, end, out);
  } else {
    narrow_.copy(begin, end, out);
  }
}

Example ExampleSet::operator[](std::int64_t i) const {
  TESSERA_CHECK(i >= 0 && i < size(), "ExampleSet: pair {} is outside [0, {})", i, size());
  Example e;
  e.src.resize(static_cast<std::size_t>(src_size(i)));
  e.tgt.resize(static_cast<std::size_t>(tgt_size(i)));
  copy_src(i, e.src.data());
  copy_tgt(i, e.tgt.data());
  return e;
}

std::vector<Example> ExampleSet::to_vector() const {
  std::vector<Example> out;
  out.reserve(static_cast<std::size_t>(size()));
  for (std::int64_t i = 0; i < size(); ++i) out.push_back((*this)[i]);
  return out;
}

void ExampleSet::shrink_to_fit() {
  ends_.shrink_to_fit();
  narrow_.shrink_to_fit();
  wide_.shrink_to_fit();
}

std::int32_t ExampleSet::id(std::int64_t k) const {
  if (owner_)
    return wide_ids_ ? static_cast<const std::int32_t*>(in_place_ids_)[k]
                     : static_cast<const std::uint16_t*>(in_place_ids_)[k];
  return wide_ids_ ? wide_[k] : static_cast<std::int32_t>(narrow_[k]);
}

std::int64_t ExampleSet::bytes() const { return ends_.bytes() + narrow_.bytes() + wide_.bytes(); }

std::int64_t ExampleSet::in_place_bytes() const {
  return owner_ ? 16 * in_place_pairs_ + ids() * (wide_ids_ ? 4 : 2) : 0;
}

ExampleSet::Extent ExampleSet::extent() const {
  Extent e;
  for (std::int64_t i = 0; i < size(); ++i) {
    e.longest_src = std::max(e.longest_src, src_size(i));
    e.longest_tgt = std::max(e.longest_tgt, tgt_size(i));
    for (int side = 0; side < 2; ++side) {
      std::int32_t& max_id = side == 0 ? e.max_src_id : e.max_tgt_id;
      for (std::int64_t k = end(2 * i - 1 + side); k < end(2 * i + side); ++k) max_id = std::max(max_id, id(k));
    }
  }
  return e;
}

bool ExampleSet::operator==(const ExampleSet& other) const {
  if (size() != other.size()) return false;
  for (std::int64_t k = 0; k < 2 * size(); ++k)
    if (end(k) != other.end(k)) return false;
  for (std::int64_t k = 0; k < ids(); ++k)
    if (id(k) != other.id(k)) return false;
  return true;
}

}  // namespace tessera::data
