// Line-aligned parallel text (the Moses / fairseq / Marian convention: line i of train.en
// translates to line i of train.de). Files ending in .gz are read through zlib.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tessera::data {

// All lines of a text file (without the trailing newline; a final line without newline counts).
// Throws tessera::Error naming the file for an unreadable file, and naming file and line
// (1-based), the byte and where it is in the line (1-based) for invalid UTF-8:
// "train.de:17: not UTF-8 text: byte 5 of the line is 0xe9".
std::vector<std::string> read_lines(const std::string& path);

// Standard input's lines, read as LineReader(kStandardInput) reads them.
std::vector<std::string> read_standard_input_lines();

struct ParallelText {
  std::vector<std::string> src, tgt;
};

// Reads both files; throws naming both files and their line counts when the counts differ.
ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path);

// The longest line read: 1 MiB, some 100,000 words, beyond any sentence a model trains on or
// translates. A longer one is a file whose lines end in CR alone, or no text at all (/dev/zero);
// reading it whole could take all memory, and encoding it some 200 times its size.
inline constexpr std::size_t kMaxLineBytes = std::size_t{1} << 20;

// Byte offset of the first invalid UTF-8 sequence in `s`, or -1 when `s` is valid UTF-8.
std::int64_t find_invalid_utf8(const std::string& s);

// Throws tessera::Error when `line` (line `line_no` of `name`, a file or "<stdin>") is not valid
// UTF-8, in the one form every reader of text uses: "NAME:LINE: not UTF-8 text: byte N of the line
// is 0xHH", with a hint for gzip data on a first line.
void check_utf8_line(const std::string& line, const std::string& name, std::int64_t line_no);

struct StandardInput {};
inline constexpr StandardInput kStandardInput{};

// Streams the lines of a text file (.gz through zlib) with the same rules as read_lines: no
// trailing "\n" or "\r", UTF-8 checked. For corpora too large to hold in memory at once.
class LineReader {
 public:
  explicit LineReader(const std::string& path);  // throws naming the file when it cannot be opened
  // Standard input, "<stdin>" in messages, read as it arrives (read(2), no stdio buffer: see
  // ready()). A descriptor that cannot be read (a folder, a closed one) is an error saying why, not
  // an empty input: a stream would take it for the end, and nothing would be translated or scored
  // in silence.
  explicit LineReader(StandardInput);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  // The next line into `line`; false at the end of the file.
  bool next(std::string& line);
  std::int64_t line_number() const { return line_no_; }  // 1-based number of the last line read
  // Whether next() can return without waiting: a whole line (or the end) is buffered, or the input
  // has bytes (or its end) ready now. Always true for a file; false on standard input while a person
  // typing has sent nothing more (a terminal passes whole lines; on a pipe, bytes that are the start
  // of a line only make it true too).
  bool ready() const;

 private:
  std::size_t fill();
  bool finish(std::string& line);
  void close();
  std::string path_;
  bool gz_ = false;
  bool stdin_ = false;
  void* handle_ = nullptr;  // gzFile or std::FILE* (standard input: none, its descriptor is read)
  std::vector<char> buf_;
  std::size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  std::int64_t line_no_ = 0;
};

// Streams a parallel text in chunks of pairs, for corpora too large to hold at once, with
// read_parallel's checks: each line's UTF-8, and equal line counts (found when one file ends
// before the other: the error names both files and their full line counts).
class ParallelReader {
 public:
  ParallelReader(const std::string& src_path, const std::string& tgt_path);  // throws naming a file it cannot open
  // The next `max_pairs` pairs (fewer at the end) into `chunk`, replacing what it held; false when
  // none are left.
  bool next(ParallelText& chunk, std::int64_t max_pairs);
  // Reads the rest through, keeping nothing (the checks above only); returns how many pairs.
  std::int64_t skip_rest() { return skip(std::numeric_limits<std::int64_t>::max()); }
  // The same for the next `max_pairs` pairs at most.
  std::int64_t skip(std::int64_t max_pairs);
  // A 64-bit hash of every pair read so far, in order (lines as returned: without "\n" or "\r"):
  // what an encoded copy of the text is checked against (a changed line changes it).
  std::uint64_t fingerprint() const { return fingerprint_; }

 private:
  bool next_pair(std::string& s, std::string& t);  // false at the end of both files
  [[noreturn]] void fail_counts(LineReader& longer, bool src_is_longer);
  std::string src_path_, tgt_path_;
  LineReader src_, tgt_;
  std::uint64_t fingerprint_ = 0;
};

}  // namespace tessera::data
