// The corpus file: encoded training pairs on disk in the form they are trained from, which every
// rank maps read-only (MAP_SHARED), so that the ranks of a machine share one copy through the page
// cache instead of holding one each. Versioned and checksummed: a header (magic, format version,
// counts, checksums), the sequence ends (the index), then the ids. docs/data.md describes it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/hash.h"
#include "data/examples.h"

namespace tessera::data {

// The form this build writes and reads; a file of another is not used (the text is encoded again).
inline constexpr std::uint32_t kExampleFileVersion = 2;

// What a corpus file records beside the pairs: what it was made from (`key`, a hash of the text,
// the vocabularies and the length limit), the pairs encoding dropped, and (read back) the largest
// id and longest sequence of each side.
struct ExampleFileInfo {
  std::uint64_t key = 0;
  std::int64_t empty = 0, too_long = 0;
  ExampleSet::Extent extent;
};

// `path`.<host>.<pid>.<random>: unique among writers of one path (ranks of other jobs, other
// machines); their temporary files are named by it and end in ".tmp". What a killed writer left
// goes when the next one writes `path`.
std::string writer_prefix(const std::string& path);

// Writes a corpus file section by section (every sequence end, then every id) into a temporary file
// that finish() renames over `path`: an error or a crash never leaves a half-written `path`, and two
// writers of one path leave one whole file. Temporaries of `path` that killed writers left are
// removed first (of this machine's writers, those whose process is gone; of any, those a day old).
// Throws naming the file and the reason.
class ExampleFileWriter {
 public:
  ExampleFileWriter(const std::string& path, int id_bytes);
  ~ExampleFileWriter();  // removes the temporary file unless finish() renamed it
  ExampleFileWriter(const ExampleFileWriter&) = delete;
  ExampleFileWriter& operator=(const ExampleFileWriter&) = delete;
  // Sequence ends, each plus `offset` (ends of a part counted from its own first id).
  void add_ends(std::span<const std::int64_t> ends, std::int64_t offset);
  void add_ids(const void* ids, std::int64_t count);  // `count` ids of id_bytes each
  void finish(const ExampleFileInfo& info);           // the header, fsync, then the rename

 private:
  void put(const void* data, std::size_t bytes, StreamChecksum& sum);
  [[noreturn]] void fail_write(const std::string& why);
  std::string path_, tmp_;
  std::FILE* out_ = nullptr;
  int id_bytes_;
  std::int64_t ends_ = 0, ids_ = 0;
  StreamChecksum ends_sum_, ids_sum_;
};

// Writes `set` to `path` (ExampleFileWriter). `info.extent` is taken from the set.
void write_example_file(const std::string& path, const ExampleSet& set, const ExampleFileInfo& info);

// The pairs in `path`, mapped read-only and read in place (ExampleSet::in_place), when it is a
// whole, undamaged corpus file of this version made from `key`; otherwise nullopt, with `why`
// saying what is wrong with it (missing, an older version, another key, truncated, a checksum that
// does not match, ...). Checks the header and the index (its checksum, the ends' order), and with
// `check_ids` the ids' checksum too (a pass over the whole file). Throws only for want of memory.
std::optional<ExampleSet> read_example_file(const std::string& path, std::uint64_t key, ExampleFileInfo& info,
                                            std::string& why, bool check_ids = true);

// One rank's share of the pairs, written as it is encoded into two files, `prefix`.ends.tmp (a
// header, then the ends counted from the share's first id) and `prefix`.ids.tmp; join_example_parts
// makes one corpus file of the shares. Throws naming the file.
class ExamplePartWriter {
 public:
  ExamplePartWriter(const std::string& prefix, int id_bytes);
  ~ExamplePartWriter();  // closes (the files stay: the joiner reads them)
  ExamplePartWriter(const ExamplePartWriter&) = delete;
  ExamplePartWriter& operator=(const ExamplePartWriter&) = delete;
  void add(std::span<const std::int32_t> src, std::span<const std::int32_t> tgt);
  void finish(std::int64_t empty, std::int64_t too_long);

 private:
  std::string prefix_;
  std::FILE* ends_ = nullptr;
  std::FILE* ids_ = nullptr;
  int id_bytes_;
  std::int64_t pairs_ = 0, ids_count_ = 0;
  ExampleSet::Extent extent_;
  std::vector<std::uint16_t> narrow_;  // a sequence's ids, when written in 16 bits
};

// The parts at `prefixes` (ExamplePartWriter), in order, as one corpus file at `path` made from
// `key`: the same bytes as one writer of all the pairs would write. Throws naming a part that is
// missing or damaged, or the file. Removes nothing.
void join_example_parts(const std::string& path, const std::vector<std::string>& prefixes, std::uint64_t key);
// Removes a part's files (those that exist).
void remove_example_part(const std::string& prefix);

}  // namespace tessera::data
