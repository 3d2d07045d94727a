#include "data/corpus.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "common/error.h"
#include "common/hash.h"
#include "common/text.h"

namespace tessera::data {

namespace {

[[noreturn]] void fail_line_too_long(const std::string& name, std::int64_t line_no) {
  fail("{}:{}: a line longer than {} MiB (are its lines ended by CR alone? is it text at all?)", name, line_no,
       kMaxLineBytes >> 20);
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

// ---- LineReader ----

LineReader::LineReader(const std::string& path) : path_(path), buf_(1 << 16) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("cannot read '{}': {}", path, std::strerror(EISDIR));
  gz_ = ends_with(path, ".gz");
  errno = 0;
  if (gz_) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) fail("cannot read '{}': {}", path, errno != 0 ? std::strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 17);
    handle_ = f;
  } else {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) fail("cannot read '{}': {}", path, std::strerror(errno));
    handle_ = f;
  }
}

LineReader::LineReader(StandardInput) : path_("<stdin>"), stdin_(true), buf_(1 << 16) {
  // Closed, descriptor 0 would be the next file opened: a file written later would be read as input.
  if (::fcntl(STDIN_FILENO, F_GETFD) < 0) fail("cannot read standard input: {}", std::strerror(errno));
}

LineReader::~LineReader() { close(); }

void LineReader::close() {
  if (handle_ == nullptr) return;
  if (gz_)
    gzclose(static_cast<gzFile>(handle_));
  else
    std::fclose(static_cast<std::FILE*>(handle_));
  handle_ = nullptr;
}

std::size_t LineReader::fill() {
  if (eof_) return 0;
  std::size_t got = 0;
  if (stdin_) {
    ssize_t n = 0;
    do n = ::read(STDIN_FILENO, buf_.data(), buf_.size());
    while (n < 0 && errno == EINTR);
    if (n < 0) fail("cannot read standard input: {}", std::strerror(errno));
    got = static_cast<std::size_t>(n);
  } else if (gz_) {
    gzFile f = static_cast<gzFile>(handle_);
    errno = 0;
    const int n = gzread(f, buf_.data(), static_cast<unsigned>(buf_.size()));
    // At the end, a truncated stream leaves Z_BUF_ERROR ("unexpected end of file"), which gzread
    // itself does not treat as an error.
    int errnum = Z_OK;
    const char* msg = n <= 0 ? gzerror(f, &errnum) : nullptr;
    if (errnum != Z_OK) {
      std::string text = errnum == Z_ERRNO ? std::strerror(errno) : msg;
      const std::string prefix = path_ + ": ";  // zlib names the file itself
      if (text.compare(0, prefix.size(), prefix) == 0) text.erase(0, prefix.size());
      fail("cannot read '{}': {}", path_, text);
    }
    got = static_cast<std::size_t>(n);
  } else {
    std::FILE* f = static_cast<std::FILE*>(handle_);
    got = std::fread(buf_.data(), 1, buf_.size(), f);
    if (got < buf_.size() && std::ferror(f)) fail("cannot read '{}': {}", path_, std::strerror(errno));
  }
  if (got == 0) eof_ = true;
  begin_ = 0;
  end_ = got;
  return got;
}

bool LineReader::next(std::string& line) {
  line.clear();
  bool any = false;  // read at least one byte of this line (or its newline)
  for (;;) {
    if (begin_ == end_ && fill() == 0) break;
    any = true;
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    if (nl != nullptr) {
      const std::size_t len = static_cast<std::size_t>(static_cast<const char*>(nl) - start);
      line.append(start, len);
      begin_ += len + 1;
      return finish(line);
    }
    line.append(start, end_ - begin_);
    begin_ = end_;
    // Bounds the memory as the line grows; finish() checks the exact length, "\r" dropped.
    if (line.size() > kMaxLineBytes + 1) fail_line_too_long(path_, line_no_ + 1);
  }
  if (!any) return false;
  return finish(line);  // a final line without newline
}

bool LineReader::ready() const {
  if (!stdin_ || eof_ || std::memchr(buf_.data() + begin_, '\n', end_ - begin_) != nullptr) return true;
  pollfd in{STDIN_FILENO, POLLIN, 0};
  return ::poll(&in, 1, 0) > 0;  // bytes, the end (POLLHUP), or an error next() reports
}

bool LineReader::finish(std::string& line) {
  ++line_no_;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.size() > kMaxLineBytes) fail_line_too_long(path_, line_no_);
  check_utf8_line(line, path_, line_no_);
  return true;
}

// ---- UTF-8 ----

std::int64_t find_invalid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0, min = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0Fu, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07u, min = 0x10000;
    } else {
      return static_cast<std::int64_t>(i);  // continuation byte, C0/C1 (overlong) or F5..FF
    }
    if (i + len > n) return static_cast<std::int64_t>(i);  // truncated
    for (std::size_t k = 1; k < len; ++k) {
      const unsigned char cc = p[i + k];
      if ((cc & 0xC0) != 0x80) return static_cast<std::int64_t>(i);
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return static_cast<std::int64_t>(i);
    i += len;
  }
  return -1;
}

void check_utf8_line(const std::string& line, const std::string& name, std::int64_t line_no) {
  const std::int64_t bad = find_invalid_utf8(line);
  if (bad < 0) return;
  const bool gzip = line_no == 1 && line.size() >= 2 && line[0] == '\x1f' && line[1] == '\x8b';
  fail("{}:{}: not UTF-8 text: byte {} of the line is 0x{:02x}{}", name, line_no, bad + 1,
       static_cast<unsigned char>(line[static_cast<std::size_t>(bad)]),
       !gzip ? ""
       : name == "<stdin>"
           ? " (it starts as gzip data does: decompress it first, with zcat say)"
           : " (it starts as gzip data does: a compressed file is read as such when its name ends in .gz)");
}

// ---- files ----

namespace {
std::vector<std::string> all_lines(LineReader& reader) {
  std::vector<std::string> lines;
  std::string line;
  while (reader.next(line)) lines.push_back(std::move(line));
  return lines;
}
}  // namespace

std::vector<std::string> read_lines(const std::string& path) {
  LineReader reader(path);
  return all_lines(reader);
}

std::vector<std::string> read_standard_input_lines() {
  LineReader reader(kStandardInput);
  return all_lines(reader);
}

ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path) {
  ParallelText t;
  ParallelReader(src_path, tgt_path).next(t, std::numeric_limits<std::int64_t>::max());
  return t;
}

// ---- ParallelReader ----

ParallelReader::ParallelReader(const std::string& src_path, const std::string& tgt_path)
    : src_path_(src_path), tgt_path_(tgt_path), src_(src_path), tgt_(tgt_path) {}

bool ParallelReader::next_pair(std::string& s, std::string& t) {
  const bool got_src = src_.next(s);
  const bool got_tgt = tgt_.next(t);
  if (got_src != got_tgt) fail_counts(got_src ? src_ : tgt_, got_src);
  if (got_src) fingerprint_ = hash_combine(hash_combine(fingerprint_, s), t);
  return got_src;
}

bool ParallelReader::next(ParallelText& chunk, std::int64_t max_pairs) {
  chunk.src.clear();
  chunk.tgt.clear();
  std::string s, t;
  while (static_cast<std::int64_t>(chunk.src.size()) < max_pairs && next_pair(s, t)) {
    chunk.src.push_back(std::move(s));
    chunk.tgt.push_back(std::move(t));
  }
  return !chunk.src.empty();
}

std::int64_t ParallelReader::skip(std::int64_t max_pairs) {
  std::int64_t pairs = 0;
  std::string s, t;
  while (pairs < max_pairs && next_pair(s, t)) ++pairs;
  return pairs;
}

void ParallelReader::fail_counts(LineReader& longer, bool src_is_longer) {
  const std::int64_t shorter_lines = longer.line_number() - 1;
  std::string line;
  while (longer.next(line)) {
  }
  const std::int64_t src_lines = src_is_longer ? longer.line_number() : shorter_lines;
  const std::int64_t tgt_lines = src_is_longer ? shorter_lines : longer.line_number();
  fail("{} has {} but {} has {}", src_path_, counted(static_cast<std::size_t>(src_lines), "line"), tgt_path_,
       counted(static_cast<std::size_t>(tgt_lines), "line"));
}

}  // namespace tessera::data
