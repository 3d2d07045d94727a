#include "launch/commands.h"

namespace tessera::launch {

// In progress.
Command add_score_command(CLI::App& parent) {
  CLI::App* cmd = parent.add_subcommand("score", "(not yet available)");
  return {cmd, [] { return 1; }};
}

}  // namespace tessera::launch
