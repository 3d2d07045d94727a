// Line-aligned parallel text (the Moses / fairseq / Marian convention: line i of train.en
// translates to line i of train.de). Files ending in .gz are read through zlib.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::data {

// All lines of a text file (without the trailing newline; a final line without newline counts).
// Throws tessera::Error naming the file for an unreadable file, and naming file and line
// (1-based) for invalid UTF-8.
std::vector<std::string> read_lines(const std::string& path);

struct ParallelText {
  std::vector<std::string> src, tgt;
};

// Reads both files; throws naming both files and their line counts when the counts differ.
ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path);

// Byte offset of the first invalid UTF-8 sequence in `s`, or -1 when `s` is valid UTF-8.
std::int64_t find_invalid_utf8(const std::string& s);

}  // namespace tessera::data
