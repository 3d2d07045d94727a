#include "launch/commands.h"

namespace tessera::launch {

// In progress.
Command add_vocab_command(CLI::App& parent) {
  CLI::App* cmd = parent.add_subcommand("vocab", "(not yet available)");
  return {cmd, [] { return 1; }};
}

}  // namespace tessera::launch
