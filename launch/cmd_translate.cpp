#include "launch/commands.h"

namespace tessera::launch {

// In progress.
Command add_translate_command(CLI::App& parent) {
  CLI::App* cmd = parent.add_subcommand("translate", "(not yet available)");
  return {cmd, [] { return 1; }};
}

}  // namespace tessera::launch
