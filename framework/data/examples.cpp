#include "data/examples.h"

#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
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

void ExampleSet::add(std::span<const std::int32_t> src, std::span<const std::int32_t> tgt) {
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
  if (wide_ids_) {
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

std::int64_t ExampleSet::bytes() const { return ends_.bytes() + narrow_.bytes() + wide_.bytes(); }

ExampleSet::Extent ExampleSet::extent() const {
  Extent e;
  for (std::int64_t i = 0; i < size(); ++i) {
    e.longest_src = std::max(e.longest_src, src_size(i));
    e.longest_tgt = std::max(e.longest_tgt, tgt_size(i));
    for (int side = 0; side < 2; ++side) {
      std::int32_t& max_id = side == 0 ? e.max_src_id : e.max_tgt_id;
      for (std::int64_t k = end(2 * i - 1 + side); k < end(2 * i + side); ++k)
        max_id = std::max(max_id, wide_ids_ ? wide_[k] : static_cast<std::int32_t>(narrow_[k]));
    }
  }
  return e;
}

bool ExampleSet::operator==(const ExampleSet& other) const {
  if (ends_.size() != other.ends_.size()) return false;
  for (std::int64_t k = 0; k < ends_.size(); ++k)
    if (ends_[k] != other.ends_[k]) return false;
  const auto id = [](const ExampleSet& s, std::int64_t k) -> std::int32_t {
    return s.wide_ids_ ? s.wide_[k] : s.narrow_[k];
  };
  for (std::int64_t k = 0; k < ids(); ++k)
    if (id(*this, k) != id(other, k)) return false;
  return true;
}

// ---- the file form ----

namespace {

constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'I', 'D', 'S', '1'};
constexpr std::uint32_t kByteOrder = 0x01020304;

// What precedes the ends and the ids; the file ends with the CRC-32 of every byte before it.
struct FileHeader {
  char magic[8];
  std::uint32_t byte_order;
  std::uint32_t id_bytes;  // 2 or 4
  std::uint64_t key;
  std::int64_t pairs, ids, empty, too_long;
};
static_assert(sizeof(FileHeader) == 56);

std::uint32_t crc_of(std::uint32_t crc, const void* data, std::size_t bytes) {
  return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

// A FILE* closed when it goes out of scope (an error path closes it too).
struct File {
  std::FILE* f = nullptr;
  ~File() {
    if (f != nullptr) std::fclose(f);
  }
};

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("unknown");
}

// Removes what writers of `path` that were killed left (`path`.<host>.<pid>.<random>.tmp, as large
// as the file): those of this machine whose process is gone, and any a day old. A live writer's
// stays (runs may share a cache folder).
void remove_leftovers(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".", here = host_name() + ".";
  const auto day_ago = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(p.parent_path().empty() ? "." : p.parent_path(), ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(".tmp")) continue;
    const std::string writer = name.substr(prefix.size());  // <host>.<pid>.<random>.tmp
    bool gone = false;
    if (writer.starts_with(here)) {
      const long pid = std::strtol(writer.c_str() + here.size(), nullptr, 10);
      gone = pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    }
    std::error_code age_ec;
    const auto written = std::filesystem::last_write_time(it->path(), age_ec);
    if (gone || (!age_ec && written < day_ago)) {
      std::error_code ignored;
      std::filesystem::remove(it->path(), ignored);
    }
  }
}

}  // namespace

void write_example_file(const std::string& path, const ExampleSet& set, const ExampleFileInfo& info) {
  // Unique among writers of one path (ranks of other jobs, other machines): each renames its own.
  const std::string tmp = fmt::format("{}.{}.{}.{:x}.tmp", path, host_name(), ::getpid(), std::random_device{}());
  remove_leftovers(path);
  std::string error;  // why writing failed; empty while it goes well
  {
    File out;
    out.f = std::fopen(tmp.c_str(), "wb");
    if (out.f == nullptr) error = std::strerror(errno);
    std::uint32_t crc = crc_of(0, nullptr, 0);
    const auto put = [&](const void* data, std::size_t bytes) {
      if (!error.empty()) return;
      if (bytes > 0 && std::fwrite(data, 1, bytes, out.f) != bytes) error = std::strerror(errno);
      crc = crc_of(crc, data, bytes);
    };
    const auto put_chunks = [&](const auto& chunked) {
      for (const auto& chunk : chunked.chunks_) put(chunk.data(), chunk.size() * sizeof(chunk[0]));
    };
    FileHeader h{};
    std::copy(std::begin(kMagic), std::end(kMagic), h.magic);
    h.byte_order = kByteOrder;
    h.id_bytes = set.wide_ids_ ? 4 : 2;
    h.key = info.key;
    h.pairs = set.size();
    h.ids = set.ids();
    h.empty = info.empty;
    h.too_long = info.too_long;
    put(&h, sizeof h);
    put_chunks(set.ends_);
    if (set.wide_ids_) {
      put_chunks(set.wide_);
    } else {
      put_chunks(set.narrow_);
    }
    const std::uint32_t sum = crc;
    put(&sum, sizeof sum);
    // Durable before it gets its name: a crash after the rename finds the whole file.
    if (error.empty() && (std::fflush(out.f) != 0 || ::fsync(::fileno(out.f)) != 0)) error = std::strerror(errno);
    if (out.f != nullptr && std::fclose(std::exchange(out.f, nullptr)) != 0 && error.empty())
      error = std::strerror(errno);
  }
  std::error_code ec;
  if (error.empty()) std::filesystem::rename(tmp, path, ec);
  if (ec) error = ec.message();
  if (error.empty()) return;
  std::filesystem::remove(tmp, ec);
  fail("cannot write encoded pairs to '{}': {}", path, error);
}

std::optional<ExampleSet> read_example_file(const std::string& path, std::uint64_t key, ExampleFileInfo& info,
                                            std::string& why) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    why = ec == std::errc::no_such_file_or_directory ? "it does not exist" : ec.message();
    return std::nullopt;
  }
  File in;
  in.f = std::fopen(path.c_str(), "rb");
  if (in.f == nullptr) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  std::uint32_t crc = crc_of(0, nullptr, 0);
  const auto get = [&](void* data, std::size_t bytes) {
    if (bytes > 0 && std::fread(data, 1, bytes, in.f) != bytes) return false;
    crc = crc_of(crc, data, bytes);
    return true;
  };
  FileHeader h{};
  if (size < sizeof h + sizeof crc || !get(&h, sizeof h)) {
    why = fmt::format("it is truncated ({} bytes)", size);
    return std::nullopt;
  }
  if (!std::equal(std::begin(kMagic), std::end(kMagic), h.magic)) {
    why = "it is not a file of encoded pairs (or of another version of this form)";
    return std::nullopt;
  }
  if (h.byte_order != kByteOrder) {
    why = "it was written on a machine of the other byte order";
    return std::nullopt;
  }
  if (h.key != key) {
    why = "it was made from other text, vocabularies or length limit";
    return std::nullopt;
  }
  // Sizes checked against the file's before anything is allocated for them.
  const bool sane = (h.id_bytes == 2 || h.id_bytes == 4) && h.pairs >= 0 && h.ids >= 0 &&
                    h.pairs < (std::int64_t{1} << 40) && h.ids < (std::int64_t{1} << 50);
  const std::uintmax_t expected = sane ? sizeof h + 16 * static_cast<std::uintmax_t>(h.pairs) +
                                             h.id_bytes * static_cast<std::uintmax_t>(h.ids) + sizeof crc
                                       : 0;
  if (!sane || size != expected) {
    why = sane ? fmt::format("it has {} bytes where its header says {} (truncated or damaged)", size, expected)
               : "its header is damaged";
    return std::nullopt;
  }
  ExampleSet set;
  const auto get_chunks = [&](auto& chunked, std::int64_t n) {
    while (chunked.size_ < n) {
      auto& chunk = chunked.chunks_.emplace_back();
      chunk.resize(static_cast<std::size_t>(std::min(n - chunked.size_, chunked.kChunk)));
      if (!get(chunk.data(), chunk.size() * sizeof(chunk[0]))) return false;
      chunked.size_ += static_cast<std::int64_t>(chunk.size());
    }
    return true;
  };
  bool read_all = get_chunks(set.ends_, 2 * h.pairs);
  set.wide_ids_ = h.id_bytes == 4;
  if (read_all) read_all = set.wide_ids_ ? get_chunks(set.wide_, h.ids) : get_chunks(set.narrow_, h.ids);
  const std::uint32_t computed = crc;
  std::uint32_t stored = 0;
  if (!read_all || !get(&stored, sizeof stored)) {
    why = "it could not be read through";
    return std::nullopt;
  }
  if (stored != computed) {
    why = "its checksum does not match its content (damaged)";
    return std::nullopt;
  }
  for (std::int64_t k = 0, last = 0; k < set.ends_.size(); last = set.ends_[k++]) {
    if (set.ends_[k] < last || set.ends_[k] > h.ids) {
      why = "its sequence ends are out of order (damaged)";
      return std::nullopt;
    }
  }
  if (set.ids() != h.ids) {
    why = "its sequence ends do not cover its ids (damaged)";
    return std::nullopt;
  }
  info = {h.key, h.empty, h.too_long};
  return set;
}

}  // namespace tessera::data
