// metrics.jsonl, the run's machine-readable log (rank 0 writes it), and the text helpers of the log
// lines.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace tessera::train {

// "1h02m03s", "2m03s" or "3s".
std::string format_duration(double seconds);
// JSON numbers: finite values as is, others as null (JSON has no NaN).
std::string json_number(double v);
// A JSON string literal: quotes, backslashes and control bytes escaped (a path may hold any).
std::string json_string(const std::string& s);

// Appends lines to RUN/metrics.jsonl. A write that fails (a full disk, a file-size limit) is said
// once on stderr, the part of the line written is cut off again (a resume appends whole lines after
// it), and the file gets no more lines in this run. Training goes on: stopping would lose the steps
// since the last checkpoint, and the log lines still reach standard output.
class MetricsLog {
 public:
  MetricsLog() = default;  // writes nothing (the ranks other than 0)
  // Opens the file for appending; `started_from_scratch` notes a fresh start after an earlier
  // attempt's lines (the lines below start again at step 1).
  MetricsLog(const std::filesystem::path& dir, bool started_from_scratch);
  void write(const std::string& line);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace tessera::train
