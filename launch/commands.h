// Each `tessera` subcommand lives in its own cmd_*.cpp: it declares its options on a CLI11
// subcommand and returns the function that runs it once the command line is parsed.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tessera::launch {

using RunFn = std::function<int()>;

struct Command {
  CLI::App* app = nullptr;
  RunFn run;
};

Command add_train_command(CLI::App& parent);
Command add_translate_command(CLI::App& parent);
Command add_score_command(CLI::App& parent);
Command add_vocab_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_average_command(CLI::App& parent);

}  // namespace tessera::launch
