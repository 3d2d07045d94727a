#include "data/example_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include "common/error.h"

namespace tessera::data {

namespace {

constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'C', 'O', 'R', 'P'};
constexpr char kPartMagic[8] = {'T', 'E', 'S', 'S', 'P', 'A', 'R', 'T'};
constexpr char kVersion1Magic[8] = {'T', 'E', 'S', 'S', 'I', 'D', 'S', '1'};  // the cache before version 2
constexpr std::uint32_t kByteOrder = 0x01020304;

// The first 128 bytes of a corpus file (and of a part's ends file); the ends follow, then the ids.
struct FileHeader {
  char magic[8];
  std::uint32_t version, byte_order, id_bytes, header_bytes;
  std::uint64_t key;
  std::int64_t pairs, ids, empty, too_long;
  std::int32_t max_src_id, max_tgt_id;
  std::int64_t longest_src, longest_tgt;
  std::uint64_t ends_checksum, ids_checksum;
  std::uint64_t reserved[2];
  std::uint64_t header_checksum;  // of the bytes before it
};
static_assert(sizeof(FileHeader) == 128);

std::uint64_t header_checksum(const FileHeader& h) {
  StreamChecksum sum;
  sum.update(&h, offsetof(FileHeader, header_checksum));
  return sum.value();
}

FileHeader make_header(const char (&magic)[8], int id_bytes, std::int64_t pairs, std::int64_t ids,
                       const ExampleFileInfo& info) {
  FileHeader h{};
  std::copy(std::begin(magic), std::end(magic), h.magic);
  h.version = kExampleFileVersion;
  h.byte_order = kByteOrder;
  h.id_bytes = static_cast<std::uint32_t>(id_bytes);
  h.header_bytes = sizeof(FileHeader);
  h.key = info.key;
  h.pairs = pairs;
  h.ids = ids;
  h.empty = info.empty;
  h.too_long = info.too_long;
  h.max_src_id = info.extent.max_src_id;
  h.max_tgt_id = info.extent.max_tgt_id;
  h.longest_src = info.extent.longest_src;
  h.longest_tgt = info.extent.longest_tgt;
  return h;
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("unknown");
}

// Removes what writers of `path` that were killed left (`path`.<host>.<pid>.<random>...tmp, as
// large as the file): those of this machine whose process is gone, and any a day old. A live
// writer's stays (runs may share a cache folder).
void remove_leftovers(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".", here = host_name() + ".";
  const auto day_ago = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(p.parent_path().empty() ? "." : p.parent_path(), ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(".tmp")) continue;
    const std::string writer = name.substr(prefix.size());  // <host>.<pid>.<random>...tmp
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

std::FILE* open_for_writing(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot write encoded pairs to '{}': {}", path, std::strerror(errno));
  return f;
}

void write_or_fail(std::FILE* f, const void* data, std::size_t bytes, const std::string& path) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, f) != bytes)
    fail("cannot write encoded pairs to '{}': {}", path, std::strerror(errno));
}

}  // namespace

std::string writer_prefix(const std::string& path) {
  return fmt::format("{}.{}.{}.{:x}", path, host_name(), ::getpid(), std::random_device{}());
}

// ---- ExampleFileWriter ----

ExampleFileWriter::ExampleFileWriter(const std::string& path, int id_bytes)
    : path_(path), tmp_(writer_prefix(path) + ".tmp"), id_bytes_(id_bytes) {
  TESSERA_CHECK(id_bytes == 2 || id_bytes == 4, "ExampleFileWriter: ids of {} bytes", id_bytes);
  remove_leftovers(path);
  out_ = std::fopen(tmp_.c_str(), "wb");
  if (out_ == nullptr) fail("cannot write encoded pairs to '{}': {}", path_, std::strerror(errno));
  const FileHeader placeholder{};  // the real one once the checksums are known
  if (std::fwrite(&placeholder, sizeof placeholder, 1, out_) != 1) fail_write(std::strerror(errno));
}

ExampleFileWriter::~ExampleFileWriter() {
  if (out_ == nullptr) return;
  std::fclose(out_);
  std::error_code ignored;
  std::filesystem::remove(tmp_, ignored);
}

void ExampleFileWriter::fail_write(const std::string& why) {
  fail("cannot write encoded pairs to '{}': {}", path_, why);  // the destructor removes the temporary
}

void ExampleFileWriter::put(const void* data, std::size_t bytes, StreamChecksum& sum) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, out_) != bytes) fail_write(std::strerror(errno));
  sum.update(data, bytes);
}

void ExampleFileWriter::add_ends(std::span<const std::int64_t> ends, std::int64_t offset) {
  TESSERA_CHECK(ids_ == 0, "ExampleFileWriter: sequence ends after ids");
  std::int64_t block[4096];
  for (std::size_t at = 0; at < ends.size(); at += std::size(block)) {
    const std::size_t n = std::min(std::size(block), ends.size() - at);
    for (std::size_t k = 0; k < n; ++k) block[k] = ends[at + k] + offset;
    put(block, n * sizeof block[0], ends_sum_);
  }
  ends_ += static_cast<std::int64_t>(ends.size());
}

void ExampleFileWriter::add_ids(const void* ids, std::int64_t count) {
  put(ids, static_cast<std::size_t>(count) * static_cast<std::size_t>(id_bytes_), ids_sum_);
  ids_ += count;
}

void ExampleFileWriter::finish(const ExampleFileInfo& info) {
  TESSERA_CHECK(ends_ % 2 == 0, "ExampleFileWriter: {} sequence ends, not two a pair", ends_);
  FileHeader h = make_header(kMagic, id_bytes_, ends_ / 2, ids_, info);
  h.ends_checksum = ends_sum_.value();
  h.ids_checksum = ids_sum_.value();
  h.header_checksum = header_checksum(h);
  // Durable before it gets its name: a crash after the rename finds the whole file.
  if (std::fseek(out_, 0, SEEK_SET) != 0 || std::fwrite(&h, sizeof h, 1, out_) != 1 || std::fflush(out_) != 0 ||
      ::fsync(::fileno(out_)) != 0)
    fail_write(std::strerror(errno));
  const int closed = std::fclose(std::exchange(out_, nullptr));
  std::error_code ec;
  if (closed == 0) std::filesystem::rename(tmp_, path_, ec);
  if (closed == 0 && !ec) return;
  const std::string why = closed != 0 ? std::strerror(errno) : ec.message();
  std::filesystem::remove(tmp_, ec);
  fail_write(why);
}

void write_example_file(const std::string& path, const ExampleSet& set, const ExampleFileInfo& info) {
  ExampleFileWriter out(path, set.wide() ? 4 : 2);
  for (const std::vector<std::int64_t>& chunk : set.ends_.chunks_) out.add_ends(chunk, 0);
  if (set.wide()) {
    for (const auto& chunk : set.wide_.chunks_) out.add_ids(chunk.data(), static_cast<std::int64_t>(chunk.size()));
  } else {
    for (const auto& chunk : set.narrow_.chunks_) out.add_ids(chunk.data(), static_cast<std::int64_t>(chunk.size()));
  }
  ExampleFileInfo with_extent = info;
  with_extent.extent = set.extent();
  out.finish(with_extent);
}

// ---- reading: mapped ----

namespace {

// A file mapped read-only, unmapped with the last ExampleSet that reads it.
struct Mapping {
  void* addr = nullptr;
  std::size_t bytes = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, bytes);
  }
};

// `path` mapped whole, or null with `why`.
std::shared_ptr<Mapping> map_file(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO would wait for a writer
  if (fd < 0) {
    why = errno == ENOENT ? "it does not exist" : std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  auto mapping = std::make_shared<Mapping>();
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = S_ISDIR(st.st_mode) ? std::strerror(EISDIR) : "it is not a regular file";
  } else if (st.st_size == 0) {
    why = "it is truncated (0 bytes)";
  } else {
    mapping->bytes = static_cast<std::size_t>(st.st_size);
    void* addr = ::mmap(nullptr, mapping->bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED)
      why = fmt::format("it cannot be mapped: {}", std::strerror(errno));
    else
      mapping->addr = addr;
  }
  ::close(fd);  // the mapping stays
  return mapping->addr != nullptr ? mapping : nullptr;
}

// Why the header `h` of a file of `size` bytes is not one to use for `key`, or "".
std::string header_misfit(const FileHeader& h, std::size_t size, std::uint64_t key) {
  if (std::equal(std::begin(kVersion1Magic), std::end(kVersion1Magic), h.magic))
    return fmt::format("it is of format version 1 (an older Tessera's); this one reads version {}",
                       kExampleFileVersion);
  if (!std::equal(std::begin(kMagic), std::end(kMagic), h.magic)) return "it is not a Tessera corpus file";
  if (h.byte_order != kByteOrder) return "it was written on a machine of the other byte order";
  if (h.version != kExampleFileVersion)
    return fmt::format("it is of format version {}; this Tessera reads version {}", h.version, kExampleFileVersion);
  if (h.header_checksum != header_checksum(h)) return "its header's checksum does not match it (damaged)";
  if (h.key != key) return "it was made from other text, vocabularies or length limit";
  // Sizes checked against the file's before anything is read by them.
  const bool sane = (h.id_bytes == 2 || h.id_bytes == 4) && h.header_bytes == sizeof h && h.pairs >= 0 && h.ids >= 0 &&
                    h.pairs < (std::int64_t{1} << 40) && h.ids < (std::int64_t{1} << 50);
  if (!sane) return "its header is damaged";
  const std::size_t expected =
      sizeof h + 16 * static_cast<std::size_t>(h.pairs) + h.id_bytes * static_cast<std::size_t>(h.ids);
  if (size != expected)
    return fmt::format("it has {} bytes where its header says {} (truncated or damaged)", size, expected);
  return "";
}

// Why the index (`pairs` pairs' sequence ends over `ids` ids) cannot be trusted, or "".
std::string index_misfit(const FileHeader& h, const std::int64_t* ends) {
  StreamChecksum sum;
  sum.update(ends, 16 * static_cast<std::size_t>(h.pairs));
  if (sum.value() != h.ends_checksum) return "its index's checksum does not match it (damaged)";
  // Also behind a checksum that matches (as a collision would give): sequences read in place must
  // stay within the ids.
  for (std::int64_t k = 0, last = 0; k < 2 * h.pairs; last = ends[k++])
    if (ends[k] < last || ends[k] > h.ids) return "its sequence ends are out of order (damaged)";
  if ((h.pairs == 0 ? 0 : ends[2 * h.pairs - 1]) != h.ids) return "its sequence ends do not cover its ids (damaged)";
  return "";
}

}  // namespace

std::optional<ExampleSet> read_example_file(const std::string& path, std::uint64_t key, ExampleFileInfo& info,
                                            std::string& why, bool check_ids) {
  const std::shared_ptr<Mapping> mapping = map_file(path, why);
  if (mapping == nullptr) return std::nullopt;
  const auto* bytes = static_cast<const unsigned char*>(mapping->addr);
  FileHeader h{};
  std::memcpy(&h, bytes, std::min(sizeof h, mapping->bytes));
  const bool version_1 = std::equal(std::begin(kVersion1Magic), std::end(kVersion1Magic), h.magic);
  if (mapping->bytes < sizeof h && !version_1) {
    why = fmt::format("it is truncated ({} bytes)", mapping->bytes);
    return std::nullopt;
  }
  why = header_misfit(h, mapping->bytes, key);
  if (!why.empty()) return std::nullopt;
  // Formed only behind a good header: a damaged count would point them anywhere.
  const auto* ends = reinterpret_cast<const std::int64_t*>(bytes + sizeof h);
  const unsigned char* ids = bytes + sizeof h + 16 * static_cast<std::size_t>(h.pairs);
  why = index_misfit(h, ends);
  if (why.empty() && check_ids) {
    StreamChecksum sum;
    sum.update(ids, h.id_bytes * static_cast<std::size_t>(h.ids));
    if (sum.value() != h.ids_checksum) why = "its ids' checksum does not match them (damaged)";
  }
  if (!why.empty()) return std::nullopt;
  info = {.key = h.key,
          .empty = h.empty,
          .too_long = h.too_long,
          .extent = {h.max_src_id, h.max_tgt_id, h.longest_src, h.longest_tgt}};
  return ExampleSet::in_place(mapping, ends, h.pairs, ids, h.id_bytes == 4);
}

// ---- parts ----

ExamplePartWriter::ExamplePartWriter(const std::string& prefix, int id_bytes) : prefix_(prefix), id_bytes_(id_bytes) {
  TESSERA_CHECK(id_bytes == 2 || id_bytes == 4, "ExamplePartWriter: ids of {} bytes", id_bytes);
  ends_ = open_for_writing(prefix_ + ".ends.tmp");
  ids_ = open_for_writing(prefix_ + ".ids.tmp");
  const FileHeader placeholder{};
  write_or_fail(ends_, &placeholder, sizeof placeholder, prefix_ + ".ends.tmp");
}

ExamplePartWriter::~ExamplePartWriter() {
  for (std::FILE* f : {ends_, ids_})
    if (f != nullptr) std::fclose(f);
}

void ExamplePartWriter::add(std::span<const std::int32_t> src, std::span<const std::int32_t> tgt) {
  std::int64_t ends[2];
  for (int side = 0; side < 2; ++side) {
    const std::span<const std::int32_t> seq = side == 0 ? src : tgt;
    std::int32_t& max_id = side == 0 ? extent_.max_src_id : extent_.max_tgt_id;
    std::int64_t& longest = side == 0 ? extent_.longest_src : extent_.longest_tgt;
    longest = std::max(longest, static_cast<std::int64_t>(seq.size()));
    narrow_.clear();
    for (const std::int32_t id : seq) {
      TESSERA_CHECK(id >= 0 && (id_bytes_ == 4 || id <= 65535), "ExamplePartWriter: id {} in {}-byte ids", id,
                    id_bytes_);
      max_id = std::max(max_id, id);
      narrow_.push_back(static_cast<std::uint16_t>(id));
    }
    write_or_fail(ids_, id_bytes_ == 4 ? static_cast<const void*>(seq.data()) : narrow_.data(),
                  seq.size() * static_cast<std::size_t>(id_bytes_), prefix_ + ".ids.tmp");
    ids_count_ += static_cast<std::int64_t>(seq.size());
    ends[side] = ids_count_;
  }
  write_or_fail(ends_, ends, sizeof ends, prefix_ + ".ends.tmp");
  ++pairs_;
}

void ExamplePartWriter::finish(std::int64_t empty, std::int64_t too_long) {
  FileHeader h =
      make_header(kPartMagic, id_bytes_, pairs_, ids_count_, {.empty = empty, .too_long = too_long, .extent = extent_});
  const std::string ends_path = prefix_ + ".ends.tmp";
  if (std::fseek(ends_, 0, SEEK_SET) != 0)
    fail("cannot write encoded pairs to '{}': {}", ends_path, std::strerror(errno));
  write_or_fail(ends_, &h, sizeof h, ends_path);
  for (std::FILE** f : {&ends_, &ids_})
    if (std::fclose(std::exchange(*f, nullptr)) != 0)
      fail("cannot write encoded pairs to '{}': {}", f == &ends_ ? ends_path : prefix_ + ".ids.tmp",
           std::strerror(errno));
}

void remove_example_part(const std::string& prefix) {
  std::error_code ignored;
  for (const char* suffix : {".ends.tmp", ".ids.tmp"}) std::filesystem::remove(prefix + suffix, ignored);
}

namespace {

// A part's header, checked against its files' sizes; throws naming the part.
FileHeader read_part_header(std::FILE* ends, const std::string& prefix) {
  FileHeader h{};
  std::error_code ec;
  const auto ends_size = std::filesystem::file_size(prefix + ".ends.tmp", ec);
  const auto ids_size = ec ? 0 : std::filesystem::file_size(prefix + ".ids.tmp", ec);
  if (ec || std::fread(&h, sizeof h, 1, ends) != 1 ||
      !std::equal(std::begin(kPartMagic), std::end(kPartMagic), h.magic) || h.pairs < 0 || h.ids < 0 ||
      ends_size != sizeof h + 16 * static_cast<std::uintmax_t>(h.pairs) ||
      ids_size != h.id_bytes * static_cast<std::uintmax_t>(h.ids))
    fail("the encoded part '{}.*.tmp' is missing or incomplete{}", prefix, ec ? ": " + ec.message() : "");
  return h;
}

// Copies `bytes` bytes of `in` (at its position) to `sink` in blocks.
template <typename Sink>
void copy_blocks(std::FILE* in, std::uintmax_t bytes, const std::string& name, Sink&& sink) {
  std::vector<unsigned char> block(std::size_t{1} << 20);
  while (bytes > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uintmax_t>(bytes, block.size()));
    if (std::fread(block.data(), 1, n, in) != n) fail("cannot read the encoded part '{}'", name);
    sink(block.data(), n);
    bytes -= n;
  }
}

struct ReadFile {
  std::FILE* f = nullptr;
  explicit ReadFile(const std::string& path) : f(std::fopen(path.c_str(), "rb")) {
    if (f == nullptr) fail("the encoded part '{}' cannot be read: {}", path, std::strerror(errno));
  }
  ~ReadFile() { std::fclose(f); }
};

}  // namespace

void join_example_parts(const std::string& path, const std::vector<std::string>& prefixes, std::uint64_t key) {
  std::vector<FileHeader> headers;
  ExampleFileInfo info{.key = key, .empty = 0, .too_long = 0, .extent = {}};
  for (const std::string& prefix : prefixes) {
    const ReadFile ends(prefix + ".ends.tmp");
    const FileHeader& h = headers.emplace_back(read_part_header(ends.f, prefix));
    TESSERA_CHECK(h.id_bytes == headers.front().id_bytes, "join_example_parts: parts of other id widths");
    info.empty += h.empty;
    info.too_long += h.too_long;
    info.extent = {std::max(info.extent.max_src_id, h.max_src_id), std::max(info.extent.max_tgt_id, h.max_tgt_id),
                   std::max(info.extent.longest_src, h.longest_src), std::max(info.extent.longest_tgt, h.longest_tgt)};
  }
  ExampleFileWriter out(path, headers.empty() ? 2 : static_cast<int>(headers.front().id_bytes));
  std::int64_t offset = 0;  // ids before the part: its ends are counted from its own first id
  for (std::size_t p = 0; p < prefixes.size(); ++p) {
    const ReadFile ends(prefixes[p] + ".ends.tmp");
    std::fseek(ends.f, sizeof(FileHeader), SEEK_SET);
    copy_blocks(ends.f, 16 * static_cast<std::uintmax_t>(headers[p].pairs), prefixes[p] + ".ends.tmp",
                [&](const unsigned char* data, std::size_t n) {
                  out.add_ends({reinterpret_cast<const std::int64_t*>(data), n / 8}, offset);
                });
    offset += headers[p].ids;
  }
  for (std::size_t p = 0; p < prefixes.size(); ++p) {
    const ReadFile ids(prefixes[p] + ".ids.tmp");
    copy_blocks(ids.f, headers[p].id_bytes * static_cast<std::uintmax_t>(headers[p].ids), prefixes[p] + ".ids.tmp",
                [&](const unsigned char* data, std::size_t n) {
                  out.add_ids(data, static_cast<std::int64_t>(n / headers[p].id_bytes));
                });
  }
  out.finish(info);
}

}  // namespace tessera::data
