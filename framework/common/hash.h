// A defined 64-bit hash for fingerprints that are stored in files (std::hash is free to differ
// between library versions): FNV-1a over the bytes, folded into a running value by SplitMix64's
// finalizer, so order matters and a change anywhere changes the result. Not cryptographic: it
// tells an accidental change, not a deliberate one.
#pragma once

#include <cstdint>
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

}  // namespace tessera
