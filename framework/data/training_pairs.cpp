#include "data/training_pairs.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/hash.h"
#include "common/progress.h"
#include "data/example_file.h"
#include "dist/launcher.h"

namespace tessera::data {

namespace {

// Part of every cache file's key: raise it when a change here (or in data::Vocab::encode) encodes
// the same text differently. (The file's form has a version of its own, in its header.)
constexpr std::uint64_t kEncodedCacheVersion = 1;

// Rank 0 alone read the text through at the start: its fingerprint is everyone's. The encoding
// reads the files again, on every rank: text that changed meanwhile (a copy still being made), or
// that differs between ranks, would give pairs that are not the hashed text's (nor each other's).
void check_text_unchanged(const io::RunConfig& cfg, const TaskData& t, std::uint64_t read, dist::Communicator* world) {
  const int ranks = world != nullptr ? world->size() : 1;
  if (const std::int32_t other = dist::count_ranks(read != t.train_fingerprint, world); other > 0)
    throw EveryRankError(fmt::format(
        "data: the training text ('{}', '{}') changed while this start read it{}: start again once the files are "
        "in place",
        cfg.data.train_src, cfg.data.train_tgt,
        ranks > 1 ? fmt::format(", or differs between machines ({} of {} ranks read other text than rank 0 first did)",
                                other, ranks)
                  : ""));
}

// Each rank encodes a share and the shares are exchanged: every rank holds all the ids.
EncodedPairs encode_in_memory(const io::RunConfig& cfg, const TaskData& t, dist::Communicator* world) {
  EncodedPairs e =
      encode_files(t.src_codec, t.tgt_codec, cfg.data.train_src, cfg.data.train_tgt, cfg.data.max_len, world);
  check_text_unchanged(cfg, t, e.text_fingerprint, world);
  return e;
}

// Why pairs of this extent do not fit this run (ids past its vocabularies, sides past
// data.max_len), or "". Behind the checksums this takes only a damaged file they missed, or a bug.
std::string misfit(const ExampleSet::Extent& e, const TaskData& t, std::int64_t max_len) {
  if (e.max_src_id >= t.src_codec.size() || e.max_tgt_id >= t.tgt_codec.size())
    return fmt::format("its ids (up to {} and {}) do not fit the vocabularies ({} and {} entries)", e.max_src_id,
                       e.max_tgt_id, t.src_codec.size(), t.tgt_codec.size());
  if (std::max(e.longest_src, e.longest_tgt) > max_len)
    return fmt::format("it holds a sequence of {} tokens, over data.max_len = {}",
                       std::max(e.longest_src, e.longest_tgt), max_len);
  return "";
}

// The file at `path` mapped, when this rank can trust it: every rank checks its header and index,
// rank 0 the checksum of its ids too (one pass over the file, not one a rank).
std::optional<ExampleSet> map_file(const std::string& path, std::uint64_t key, const TaskData& t, std::int64_t max_len,
                                   bool root, ExampleFileInfo& info, std::string& why) {
  std::optional<ExampleSet> mapped = read_example_file(path, key, info, why, root);
  if (mapped) why = misfit(info.extent, t, max_len);
  if (!why.empty()) mapped.reset();
  return mapped;
}

// Every rank's `name`, in rank order.
std::vector<std::string> gather_names(const std::string& name, dist::Communicator* world) {
  if (world == nullptr || world->size() == 1) return {name};
  std::vector<std::vector<std::int32_t>> all =
      dist::all_gather_sequences(*world, {std::vector<std::int32_t>(name.begin(), name.end())});
  std::vector<std::string> names;
  for (const std::vector<std::int32_t>& chars : all) names.emplace_back(chars.begin(), chars.end());
  return names;
}

// This rank's share of the lines into a part file; "" or why it failed. Errors of the text itself
// are met again, and thrown, by the encoding in memory that follows a failure.
std::string encode_share(const io::RunConfig& cfg, const TaskData& t, const std::string& prefix,
                         dist::Communicator* world, RangeCounts& counts) {
  const int ranks = world != nullptr ? world->size() : 1, rank = world != nullptr ? world->rank() : 0;
  const std::vector<std::int64_t> shares = dist::even_split(t.train_lines, ranks);
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += shares[static_cast<std::size_t>(r)];
  // 16-bit ids whenever the vocabularies allow, decided before any id is seen: every share alike.
  const int id_bytes = std::max(t.src_codec.size(), t.tgt_codec.size()) <= 65536 ? 2 : 4;
  try {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    if (ec) fail("cannot create folder '{}': {}", dir.string(), ec.message());
    ExamplePartWriter part(prefix, id_bytes);
    // Rank 0 shows its share's progress: the others encode theirs at the same time.
    Progress progress(ranks > 1 ? "data: encode (rank 0's share)" : "data: encode", "pairs",
                      shares[static_cast<std::size_t>(rank)], rank == 0);
    std::int64_t kept = 0;
    counts = encode_file_range(t.src_codec, t.tgt_codec, cfg.data.train_src, cfg.data.train_tgt, cfg.data.max_len,
                               first, first + shares[static_cast<std::size_t>(rank)], [&](const Example& e) {
                                 part.add(e.src, e.tgt);
                                 if (++kept % 4096 == 0) progress.set(kept);
                               });
    part.finish(counts.empty, counts.too_long);
    progress.set(kept);
    progress.finish();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Encodes the text into the corpus file at `path`: each rank its share of the lines into a part,
// then rank 0 joins the parts (the same bytes for any number of ranks). Returns whether the file
// was written; a failure is a note in the log.
bool encode_into_file(const io::RunConfig& cfg, const TaskData& t, const std::string& path, std::uint64_t key,
                      dist::Communicator* world) {
  const bool root = world == nullptr || world->rank() == 0;
  const int ranks = world != nullptr ? world->size() : 1;
  const std::string prefix = writer_prefix(path) + fmt::format(".part{}", world != nullptr ? world->rank() : 0);
  RangeCounts counts;
  const std::string error = encode_share(cfg, t, prefix, world, counts);
  if (const int failed = dist::count_ranks(!error.empty(), world); failed > 0) {
    remove_example_part(prefix);
    fmt::print("data: note: the encoded training pairs are not kept for later starts: {}\n",
               !error.empty() ? error : fmt::format("{} of {} ranks could not write their share", failed, ranks));
    return false;
  }
  try {
    check_text_unchanged(cfg, t, counts.text_fingerprint, world);
  } catch (const EveryRankError&) {
    remove_example_part(prefix);
    throw;
  }
  const std::vector<std::string> parts = gather_names(prefix, world);
  bool written = false;
  // The others wait for rank 0's join (seconds to minutes on a shared filesystem) without the
  // collectives' timeout.
  dist::root_first(world, [&] {
    if (!root) return;
    try {
      join_example_parts(path, parts, key);
      written = true;
      fmt::print("data: kept the encoded training pairs in {} for later starts\n", path);
    } catch (const std::exception& e) {
      fmt::print("data: note: the encoded training pairs are not kept for later starts: {}{}\n", e.what(),
                 ranks > 1 ? " (is the folder one every rank shares?)" : "");
    }
    for (const std::string& part : parts) remove_example_part(part);
  });
  remove_example_part(prefix);  // where rank 0 did not see it
  return dist::broadcast_u64(written ? 1 : 0, world) != 0;
}

// Rank 0 keeps pairs encoded in memory for later starts, as far as it can.
void keep_for_later(const std::string& path, std::uint64_t key, const std::string& dir, const EncodedPairs& encoded) {
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail("cannot create folder '{}': {}", dir, ec.message());
    write_example_file(path, encoded.examples,
                       {.key = key, .empty = encoded.empty, .too_long = encoded.too_long, .extent = {}});
    fmt::print("data: kept the encoded training pairs in {} for later starts\n", path);
  } catch (const std::exception& e) {
    fmt::print("data: note: the encoded training pairs are not kept for later starts: {}\n", e.what());
  }
}

}  // namespace

data::ExampleSet encode_training_pairs(const io::RunConfig& cfg, const TaskData& t, dist::Communicator* world) {
  const std::int64_t max_len = cfg.data.max_len;
  const bool root = world == nullptr || world->rank() == 0;
  const int ranks = world != nullptr ? world->size() : 1;
  if (!cfg.data.cache) return report_pairs(encode_in_memory(cfg, t, world), "training", max_len);

  std::uint64_t key =
      hash_combine(hash_combine(kEncodedCacheVersion, TESSERA_SENTENCEPIECE_VERSION), t.train_fingerprint);
  key = hash_combine(key, static_cast<std::uint64_t>(max_len));
  key = hash_combine(key, vocabularies_fingerprint(cfg, t));
  const std::string dir = cfg.data.cache_dir.empty() ? cfg.output.dir : cfg.data.cache_dir;
  const std::string path = (std::filesystem::path(dir) / fmt::format("encoded_train_{:016x}.bin", key)).string();

  const auto t0 = std::chrono::steady_clock::now();
  ExampleFileInfo info;
  std::string why;
  std::optional<ExampleSet> mapped = map_file(path, key, t, max_len, root, info, why);
  const std::int32_t missing = dist::count_ranks(!mapped, world);
  const auto use = [&](bool cached) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cached)
      fmt::print("data: read the encoded training pairs from {} ({:.1f}s; the same text, vocabularies and max_len)\n",
                 path, seconds);
    else
      fmt::print("data: encoded the training text into {} in {:.1f}s ({} rank{})\n", path, seconds, ranks,
                 ranks == 1 ? "" : "s");
    EncodedPairs read;  // kept_lines stays empty: only validation pairs need them
    read.examples = std::move(*mapped);
    read.empty = info.empty;
    read.too_long = info.too_long;
    return report_pairs(std::move(read), "training", max_len);
  };
  if (missing == 0) return use(true);
  if (mapped) {  // this rank's is fine (rank 0's in a folder the others do not see, say): it is kept
    fmt::print("data: {} is not readable on every rank ({} of {} do not find it whole): encoding the text\n", path,
               missing, ranks);
  } else if (std::error_code ec; std::filesystem::exists(path, ec) || ec) {
    fmt::print("data: not using {}: {}; encoding the text again\n", path, why);
  }
  const bool have_it = mapped.has_value();
  mapped.reset();
  // None has it: the ranks encode it. Some have it: they do not share one folder, so each needs
  // all the pairs in memory.
  if (missing == ranks && encode_into_file(cfg, t, path, key, world)) {
    mapped = map_file(path, key, t, max_len, root, info, why);
    if (const std::int32_t lost = dist::count_ranks(!mapped, world); lost == 0)
      return use(false);
    else
      fmt::print(
          "data: {} is not readable on every rank after writing it ({} of {} do not find it whole{}): "
          "encoding the text\n",
          path, lost, ranks, mapped ? "" : ": " + why);
    mapped.reset();
  }
  EncodedPairs encoded = encode_in_memory(cfg, t, world);
  dist::root_first(world, [&] {
    if (root && !have_it) keep_for_later(path, key, dir, encoded);
  });
  return report_pairs(std::move(encoded), "training", max_len);
}

}  // namespace tessera::data
