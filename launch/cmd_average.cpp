#include <fmt/core.h>

#include "io/checkpoint.h"
#include "launch/commands.h"

namespace tessera::launch {

Command add_average_command(CLI::App& parent) {
  struct Options {
    std::vector<std::string> inputs;
    std::string output;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "average", "Average the weights of several checkpoints (the paper averages the last 5 or 20) into one");
  cmd->add_option("checkpoints", opt->inputs, "Checkpoints of one model (same parameter names and shapes)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--output,-o", opt->output, "Where to write the averaged weights (a weights-only checkpoint)")
      ->required();
  return {cmd,
          [opt] {
            const io::Checkpoint avg = io::average_checkpoints(opt->inputs);
            io::save_checkpoint(opt->output, avg);
            fmt::print("average: wrote {} ({} tensors, the mean of {} checkpoints)\n", opt->output, avg.model.size(),
                       opt->inputs.size());
            return 0;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
