#include "data/spm_model_check.h"

#include <fmt/core.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace tessera::data {
namespace {

// One field of a protobuf message (wire format: a varint key, field number << 3 | wire type).
struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire_type = 0;
  std::string_view bytes;  // the payload of a length-delimited field (wire type 2), else empty
};

// Reads the fields of a message one by one; false at the end, or when the bytes do not parse
// (`broken` is then set).
class FieldReader {
 public:
  explicit FieldReader(std::string_view message) : rest_(message) {}
  bool next(Field& f) {
    if (rest_.empty() || broken_) return false;
    std::uint64_t key = 0;
    if (!varint(key) || key >> 3 == 0 || key >> 3 > UINT32_MAX) return fail();
    f.number = static_cast<std::uint32_t>(key >> 3);
    f.wire_type = static_cast<std::uint32_t>(key & 7);
    f.bytes = {};
    std::uint64_t skip = 0;
    switch (key & 7) {
      case 0:  // varint
        return varint(skip) || fail();
      case 1:  // 64-bit
        skip = 8;
        break;
      case 2: {  // length-delimited
        if (!varint(skip) || skip > rest_.size()) return fail();
        f.bytes = rest_.substr(0, skip);
        break;
      }
      case 5:  // 32-bit
        skip = 4;
        break;
      default:  // groups (deprecated, SentencePiece has none) and the undefined wire types 6 and 7
        return fail();
    }
    if (skip > rest_.size()) return fail();
    rest_.remove_prefix(skip);
    return true;
  }
  bool broken() const { return broken_; }

 private:
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && !rest_.empty(); shift += 7) {
      const auto byte = static_cast<std::uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool fail() {
    broken_ = true;
    return false;
  }
  std::string_view rest_;
  bool broken_ = false;
};

// A unit of darts-clone's double array, as SentencePiece's Normalizer reads it.
struct Unit {
  std::uint32_t u;
  bool has_leaf() const { return ((u >> 8) & 1) == 1; }
  std::uint32_t value() const { return u & ((1U << 31) - 1); }
  std::uint32_t label() const { return u & ((1U << 31) | 0xFF); }
  std::uint32_t offset() const { return (u >> 10) << ((u & (1U << 9)) >> 6); }
};

// What is wrong with a precompiled character map: a little-endian 32-bit trie size, the trie
// (4-byte units), then the replacement strings, each ending in NUL, that the trie's values point
// into. Every unit a byte sequence can reach is visited, as the Normalizer's prefix search
// would: its children's block and, for a key's end, the value must lie inside.
std::string charsmap_defect(std::string_view blob) {
  if (blob.empty()) return "";  // no normalization (the "identity" rule)
  std::uint32_t trie_bytes = 0;
  if (blob.size() < 4) return "shorter than its own header";
  std::memcpy(&trie_bytes, blob.data(), 4);  // little-endian in the file, as on x86 and ARM
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    return fmt::format("a trie of {} bytes in a table of {}", trie_bytes, blob.size());
  std::vector<Unit> units(trie_bytes / 4);
  std::memcpy(units.data(), blob.data() + 4, trie_bytes);
  const std::string_view strings = blob.substr(4 + trie_bytes);
  if (strings.empty() || strings.back() != '\0') return "its replacement strings do not end in NUL";
  const std::size_t n = units.size();
  std::vector<bool> seen(n, false);
  std::vector<std::uint32_t> todo = {0};  // units reached by a byte sequence (the root by none)
  seen[0] = true;
  while (!todo.empty()) {
    const std::uint32_t pos = todo.back();
    todo.pop_back();
    const std::uint64_t base = pos ^ units[pos].offset();
    if (base >= n) return fmt::format("trie unit {} leads to unit {} of {}", pos, base, n);
    if (pos != 0 && units[pos].has_leaf() && units[base].value() >= strings.size())
      return fmt::format("trie unit {} points at byte {} of {} replacement bytes", pos, units[base].value(),
                         strings.size());
    for (std::uint32_t c = 0; c < 256; ++c) {
      const std::uint64_t child = base ^ c;
      if (child >= n) return fmt::format("trie unit {} leads to unit {} of {}", pos, child, n);
      if (units[child].label() != c || seen[child]) continue;
      seen[child] = true;
      todo.push_back(static_cast<std::uint32_t>(child));
    }
  }
  return "";
}

}  // namespace

std::string spm_model_defect(std::string_view model) {
  // ModelProto: 1 pieces, 2 trainer_spec, 3 normalizer_spec, 5 denormalizer_spec. NormalizerSpec:
  // 2 precompiled_charsmap. Sections given twice merge, the last character map counting.
  FieldReader top(model);
  bool normalizer = false;
  std::optional<std::string_view> maps[2];  // of the normalizer, of the denormalizer
  for (Field f; top.next(f);) {
    // (Of another wire type, protobuf keeps the field as an unknown one.)
    if ((f.number != 3 && f.number != 5) || f.wire_type != 2) continue;
    if (f.number == 3) normalizer = true;
    FieldReader spec(f.bytes);
    for (Field g; spec.next(g);)
      if (g.number == 2 && g.wire_type == 2) maps[f.number == 5] = g.bytes;
    if (spec.broken()) return "its normalizer section does not parse";
  }
  if (top.broken()) return "it does not parse as a SentencePiece model";
  if (!normalizer) return "it has no normalizer section (a file cut short?)";
  for (int i = 0; i < 2; ++i)
    if (maps[i])
      if (const std::string why = charsmap_defect(*maps[i]); !why.empty())
        return fmt::format("its {}normalization table is damaged: {}", i == 1 ? "de" : "", why);
  return "";
}

}  // namespace tessera::data
