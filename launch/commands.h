// Each `tessera` subcommand lives in its own cmd_*.cpp: it declares its options on a CLI11
// subcommand and returns the function that runs it once the command line is parsed.
#pragma once

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

namespace tessera::launch {

using RunFn = std::function<int()>;

struct Command {
  CLI::App* app = nullptr;
  RunFn run;
  // Not a distributed job (average, vocab, bench): under mpirun rank 0 alone runs it and the others
  // exit 0 at once; all of them would write the same files, or skew each other's timings.
  bool one_process = false;
};

// A real number in [lo, hi] ((lo, hi] with lo_open). CLI::Range lets NaN through (every comparison
// with it is false).
inline CLI::Validator finite_range(double lo, double hi, bool lo_open = false) {
  const std::string range = fmt::format("{}{}, {}]", lo_open ? "(" : "[", lo, hi);
  return CLI::Validator(
      [lo, hi, lo_open, range](const std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v)) return fmt::format("'{}' is not a finite number", text);
        if (v < lo || (lo_open && v == lo) || v > hi) return fmt::format("{} is not in {}", text, range);
        return {};
      },
      "FLOAT in " + range);
}

Command add_train_command(CLI::App& parent);
Command add_translate_command(CLI::App& parent);
Command add_score_command(CLI::App& parent);
Command add_vocab_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_average_command(CLI::App& parent);

}  // namespace tessera::launch
