// Checks of the command line before CLI11 parses it, for the mistakes whose CLI11 message would
// blame something else or not come at all.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace tessera::launch {

struct CommandLineError {
  std::string message;  // one line, without the trailing newline
  CLI::ExitCodes exit_code;
};

// The first of these mistakes in argv, if any:
//  - an empty argument ("$OUT" with OUT unset): CLI11 takes it as a value or a stray word, and the
//    vocab command's option group loops forever on one (Debian 12's CLI11 2.1.2);
//  - a word that is none of the subcommands where one is expected ("tessera trian");
//  - an option the command does not know ("translate --check M": CLI11 says "--checkpoint is
//    required"), with what it may mean: another option's name, an option of the command before or
//    after it, or for train a config key ("--max-steps 3": "--set train.max_steps=3");
//  - an option in place of a value ("translate --checkpoint -i src": CLI11 reads '-i' as the
//    checkpoint's path).
// Everything else (values, required options, exclusions) is CLI11's to check, and so is all of a
// line that asks for --help or --version where an option may stand.
std::optional<CommandLineError> check_command_line(CLI::App& app, int argc, const char* const* argv);

}  // namespace tessera::launch
