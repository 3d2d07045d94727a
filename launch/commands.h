// Each `tessera` subcommand lives in its own cmd_*.cpp: it declares its options on a CLI11
// subcommand and returns the function that runs it once the command line is parsed.
#pragma once

#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera::launch {

using RunFn = std::function<int()>;

struct Command {
  CLI::App* app = nullptr;
  RunFn run;
  // Not a distributed job (average, vocab, bench): under mpirun rank 0 alone runs it and the others
  // exit 0 at once; all of them would write the same files, or skew each other's timings.
  bool one_process = false;
};

// Decimal digits with an optional sign ("+2" too), exactly; none for anything else ("0x10", "1e3").
inline std::optional<std::int64_t> decimal_whole_number(std::string_view text) {
  if (text.starts_with('+') && !text.starts_with("+-")) text.remove_prefix(1);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// An option holding a whole number in [lo, hi], read in decimal (CLI11 reads "010" as octal) and
// exactly (its own conversion clamps one past int64's range, 9223372036854775808 became
// 9223372036854775807, and a range check then passed it); `target` keeps its value when the option
// is not given. The help shows the range as the type, and that value as the default unless it is
// outside [lo, hi] (0 for "from the config", say).
template <typename Int>
CLI::Option* add_whole_number_option(CLI::App* cmd, const std::string& name, Int& target, std::int64_t lo,
                                     std::int64_t hi, const std::string& description) {
  const auto in_range = [lo, hi](const std::string& text) -> std::string {
    const std::optional<std::int64_t> v = decimal_whole_number(text);
    if (!v || *v < lo || *v > hi) return fmt::format("'{}' is not a whole number in [{}, {}]", text, lo, hi);
    return {};
  };
  CLI::Option* option = cmd->add_option_function<std::string>(
                               name,
                               [&target](const std::string& text) {
                                 target = static_cast<Int>(decimal_whole_number(text).value_or(0));  // checked
                               },
                               description)
                            ->check(CLI::Validator(in_range, ""))
                            ->type_name(fmt::format("INT in [{}, {}]", lo, hi));
  if (static_cast<std::int64_t>(target) >= lo && static_cast<std::int64_t>(target) <= hi)
    option->default_str(std::to_string(target));
  return option;
}

// A real number in [lo, hi]. CLI::Range lets NaN through (every comparison with it is false).
inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](const std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v)) return fmt::format("'{}' is not a finite number", text);
        if (v < lo || v > hi) return fmt::format("{} is not in [{}, {}]", text, lo, hi);
        return {};
      },
      fmt::format("FLOAT in [{}, {}]", lo, hi));
}

// --timeout of the commands that decode under mpirun (translate, score --checkpoint), as training's
// parallel.timeout_s (the same default): a rank that hangs ends the job instead of holding it.
inline CLI::Option* add_timeout_option(CLI::App* cmd, double& seconds) {
  return cmd
      ->add_option("--timeout", seconds,
                   "Under mpirun: seconds a rank waits for the others in one exchange of the translations before it "
                   "ends the job (another rank hangs: a stuck GPU, a stopped process), as parallel.timeout_s in "
                   "training; 0: no limit")
      ->check(finite_range(0.0, 1e7))
      ->capture_default_str();
}

// The file that writing `path` writes: the end of its chain of symbolic links (a name that may not
// exist yet); `path` itself when it is no link.
inline std::filesystem::path link_destination(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  std::error_code ec;
  for (int hops = 0; hops < 40 && fs::is_symlink(file, ec); ++hops) {  // 40: the kernel's own limit
    const fs::path link = fs::read_symlink(file, ec);
    if (ec) break;
    file = link.is_absolute() ? link : file.parent_path() / link;
  }
  return file;
}

// Checked before the work whose result `path` receives (a file written through a temporary beside
// it; its missing folders are made): the nearest folder that exists must be writable by this user,
// and so must the file where it exists: the rename would replace a write-protected file that the
// shell's `>` (and translate -o) refuses.
inline void check_can_create(const char* command, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    throw Error(fmt::format("{}: cannot write '{}': {}", command, path, std::strerror(errno)));
  fs::path folder = fs::absolute(path, ec).parent_path();
  while (!fs::exists(folder, ec) && folder.has_relative_path()) folder = folder.parent_path();
  if (!fs::is_directory(folder, ec))
    throw Error(fmt::format("{}: cannot write '{}': '{}' is not a folder", command, path, folder.string()));
  if (::access(folder.c_str(), W_OK) != 0)
    throw Error(
        fmt::format("{}: cannot write '{}': folder '{}': {}", command, path, folder.string(), std::strerror(errno)));
}

Command add_train_command(CLI::App& parent);
Command add_translate_command(CLI::App& parent);
Command add_score_command(CLI::App& parent);
Command add_vocab_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_average_command(CLI::App& parent);
Command add_plan_command(CLI::App& parent);

}  // namespace tessera::launch
