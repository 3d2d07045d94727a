#include "train/metrics_log.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/error.h"

namespace tessera::train {

std::string format_duration(double seconds) {
  const auto s = static_cast<std::int64_t>(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m{:02d}s", s / 3600, (s / 60) % 60, s % 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// JSON numbers: finite values as is, others as null (JSON has no NaN).
std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

// A JSON string literal: quotes, backslashes and control bytes escaped (a path may hold any).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\')
      out += fmt::format("\\{}", c);
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    else
      out += c;
  }
  return out + "\"";
}

MetricsLog::MetricsLog(const std::filesystem::path& dir, bool started_from_scratch) : path_(dir / "metrics.jsonl") {
  std::error_code ec;
  const bool earlier_lines = std::filesystem::file_size(path_, ec) > 0 && !ec;
  out_.open(path_, std::ios::app);
  TESSERA_CHECK(out_.good(), "cannot write metrics file '{}'", path_.string());
  if (earlier_lines && started_from_scratch) write("{\"started_from_scratch\": true, \"step\": 0}\n");
}

void MetricsLog::write(const std::string& line) {
  if (!out_.is_open()) return;
  std::error_code ec;
  const std::uintmax_t start = std::filesystem::file_size(path_, ec);  // every line before was flushed
  const bool sized = !ec;
  out_ << line;
  out_.flush();
  if (out_.good()) return;
  const int error = errno;
  out_.close();
  if (sized) std::filesystem::resize_file(path_, start, ec);
  print_to_stderr("warning: writing '{}' failed ({}): no more lines are written to it in this run\n", path_.string(),
                  std::strerror(error));
}

}  // namespace tessera::train
