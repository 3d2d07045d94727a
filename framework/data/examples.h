// Training pairs as token ids, held compactly: a corpus of tens of millions of pairs is held by
// every rank for the whole run, so two small vectors per pair (their headers and heap blocks weigh
// more than the ids of a short sentence) would cost gigabytes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera::data {

class ExampleSet;
struct ExampleFileInfo;

// One training pair as token ids, without bos/eos (the batcher adds them).
struct Example {
  std::vector<std::int32_t> src, tgt;
  bool operator==(const Example&) const = default;
};

// Many pairs, their ids back to back: 16-bit while every id fits (vocabularies up to 65,536 ids,
// i.e. every usual one), 32-bit from the first id that does not. Pair i's source is ids
// [end(2i-1), end(2i)) and its target [end(2i), end(2i+1)), end(-1) being 0.
// Held in this process's memory, or read in place from a mapped corpus file (data/example_file.h),
// which the ranks of a machine share through the page cache.
class ExampleSet {
 public:
  ExampleSet() = default;
  ExampleSet(std::initializer_list<Example> examples);
  explicit ExampleSet(const std::vector<Example>& examples);

  // The pairs of `pairs` sequence ends and their ids (uint16_t, or int32_t when `wide`), read in
  // place; `owner` keeps the memory they lie in (a file mapping) alive as long as any copy of the set.
  // The caller has checked that the ends ascend and stay within the ids. Such a set is read-only.
  static ExampleSet in_place(std::shared_ptr<const void> owner, const std::int64_t* ends, std::int64_t pairs,
                             const void* ids, bool wide);

  // Appends a pair. Throws on a negative id, leaving the set as it was, and on a set read in place.
  void add(std::span<const std::int32_t> src, std::span<const std::int32_t> tgt);
  void add(const Example& e) { add(e.src, e.tgt); }

  std::int64_t size() const { return owner_ ? in_place_pairs_ : ends_.size() / 2; }
  bool empty() const { return size() == 0; }
  std::int64_t src_size(std::int64_t i) const { return end(2 * i) - end(2 * i - 1); }
  std::int64_t tgt_size(std::int64_t i) const { return end(2 * i + 1) - end(2 * i); }
  // Copies pair i's source (target) ids to `out`, which has room for src_size(i) (tgt_size(i)).
  void copy_src(std::int64_t i, std::int32_t* out) const { copy_ids(end(2 * i - 1), end(2 * i), out); }
  void copy_tgt(std::int64_t i, std::int32_t* out) const { copy_ids(end(2 * i), end(2 * i + 1), out); }
  Example operator[](std::int64_t i) const;  // a copy of pair i
  std::vector<Example> to_vector() const;    // a copy of every pair (for tests and small sets)

  void shrink_to_fit();                 // releases the spare room of the last chunks
  std::int64_t bytes() const;           // heap bytes held by the ids and ends (capacity)
  std::int64_t in_place_bytes() const;  // bytes of the ids and ends read in place (0: none)
  bool in_place() const { return owner_ != nullptr; }
  bool wide() const { return wide_ids_; }          // 32-bit ids
  bool operator==(const ExampleSet& other) const;  // the same pairs, whatever the widths

  // The largest id and the longest sequence of each side (all 0 for an empty set).
  struct Extent {
    std::int32_t max_src_id = 0, max_tgt_id = 0;
    std::int64_t longest_src = 0, longest_tgt = 0;
  };
  Extent extent() const;

 private:
  friend void write_example_file(const std::string&, const ExampleSet&, const ExampleFileInfo&);

  // An array grown in chunks of 2^20 elements: appending never moves what is there, so a set of
  // gigabytes grows without the doubled peak (and the copy) of one growing std::vector.
  template <typename T>
  class Chunked {
   public:
    static constexpr int kChunkBits = 20;
    static constexpr std::int64_t kChunk = std::int64_t{1} << kChunkBits;
    void push_back(T value);
    void truncate(std::int64_t n);  // keeps the first n elements (n <= size())
    T operator[](std::int64_t k) const { return chunks_[k >> kChunkBits][k & (kChunk - 1)]; }
    template <typename Out>
    void copy(std::int64_t begin, std::int64_t end, Out* out) const;
    std::int64_t size() const { return size_; }
    std::int64_t bytes() const;
    void shrink_to_fit();
    std::vector<std::vector<T>> chunks_;
    std::int64_t size_ = 0;
  };

  std::int64_t end(std::int64_t k) const { return k < 0 ? 0 : owner_ ? in_place_ends_[k] : ends_[k]; }
  std::int64_t ids() const { return end((owner_ ? 2 * in_place_pairs_ : ends_.size()) - 1); }
  std::int32_t id(std::int64_t k) const;
  void copy_ids(std::int64_t begin, std::int64_t end, std::int32_t* out) const;
  void widen();

  Chunked<std::int64_t> ends_;     // where each sequence ends: a pair's source, then its target
  Chunked<std::uint16_t> narrow_;  // the ids while all fit in 16 bits
  Chunked<std::int32_t> wide_;     // all of them once one does not
  bool wide_ids_ = false;
  // Read in place: what keeps the memory alive, and the arrays in it.
  std::shared_ptr<const void> owner_;
  const std::int64_t* in_place_ends_ = nullptr;
  const void* in_place_ids_ = nullptr;
  std::int64_t in_place_pairs_ = 0;
};

}  // namespace tessera::data
