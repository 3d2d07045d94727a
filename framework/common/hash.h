// A defined 64-bit hash for fingerprints that are stored in files (std::hash is free to differ
// between library versions): FNV-1a over the bytes, folded into a running value by SplitMix64's
// finalizer, so order matters and a change anywhere changes the result. Not cryptographic: it
// tells an accidental change, not a deliberate one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t hash_bytes(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

// `seed` followed by `bytes` (its length included, so "ab","c" and "a","bc" differ).
constexpr std::uint64_t hash_combine(std::uint64_t seed, std::string_view bytes) {
  return mix64(seed ^ mix64(hash_bytes(bytes) + bytes.size()));
}
constexpr std::uint64_t hash_combine(std::uint64_t seed, std::uint64_t value) {
  return mix64(seed ^ mix64(value + 0x9e3779b97f4a7c15ULL));
}

// Of rows of text or of token ids (their bytes, row by row): what each rank read, to compare.
template <typename Rows>
std::uint64_t fingerprint_rows(const Rows& rows, std::uint64_t h = 0) {
  h = hash_combine(h, static_cast<std::uint64_t>(rows.size()));
  for (const auto& r : rows)
    h = hash_combine(h, std::string_view(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(r[0])));
  return h;
}

// A checksum of a stream of bytes of gigabytes (a corpus file), some five times faster than CRC-32:
// FNV-1a's multiply over 8-byte words in four lanes. A change of any one word changes its lane (each
// step is a bijection of the lane), so a flipped byte is always found. The value depends only on the
// bytes, not on how update() was called.
class StreamChecksum {
 public:
  void update(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += bytes;
    if (pending_ > 0) {
      const std::size_t take = bytes < kBlock - pending_ ? bytes : kBlock - pending_;
      std::memcpy(buffer_ + pending_, p, take);
      pending_ += take, p += take, bytes -= take;
      if (pending_ < kBlock) return;
      block(buffer_);
      pending_ = 0;
    }
    for (; bytes >= kBlock; p += kBlock, bytes -= kBlock) block(p);
    std::memcpy(buffer_, p, bytes);
    pending_ = bytes;
  }
  std::uint64_t value() const {
    StreamChecksum last = *this;  // the tail, zero-padded to a block; the length tells the padding apart
    std::memset(last.buffer_ + pending_, 0, kBlock - pending_);
    if (pending_ > 0) last.block(last.buffer_);
    std::uint64_t h = hash_combine(0, total_);
    for (const std::uint64_t lane : last.lanes_) h = hash_combine(h, lane);
    return h;
  }

 private:
  static constexpr std::size_t kBlock = 32;
  void block(const unsigned char* p) {
    for (int k = 0; k < 4; ++k) {
      std::uint64_t word = 0;
      std::memcpy(&word, p + 8 * k, 8);
      lanes_[k] = (lanes_[k] ^ word) * 0x100000001b3ULL;
    }
  }
  std::uint64_t lanes_[4] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL, 0x9e3779b97f4a7c15ULL, 1};
  unsigned char buffer_[kBlock] = {};
  std::size_t pending_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace tessera
