#include <fmt/core.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/checkpoint.h"
#include "launch/commands.h"
#include "launch/schema.h"

namespace tessera::launch {
namespace {

// The same file twice would weigh double, silently; writing over an input (a full checkpoint,
// say) would replace it with weights only. Both are refused before anything is read.
void check_average_paths(const std::vector<std::string>& inputs, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (fs::equivalent(inputs[i], inputs[j], ec))
        fail("average: '{}' and '{}' are the same file: each checkpoint counts once", inputs[j], inputs[i]);
    if (fs::exists(output, ec) && fs::equivalent(inputs[i], output, ec))
      fail("average: the output '{}' is the input '{}': write the average to another file", output, inputs[i]);
  }
}

// Shapes cannot tell how the attention weights split into heads: the mean of two checkpoints with
// another model.heads is no model of either (the first's config would decode it).
void check_same_heads(const std::vector<std::string>& inputs) {
  std::int64_t first = 0;
  for (const std::string& path : inputs) {
    const std::int64_t heads =
        io::Config::parse(tessera_schema(), io::read_checkpoint_header(path).config_yaml, path + ":/config")
            .integer("model.heads");
    if (first == 0) first = heads;
    if (heads != first)
      fail(
          "average: '{}' has model.heads = {} but '{}' has {}: the same weights split into other heads are another "
          "model",
          path, heads, inputs.front(), first);
  }
}

}  // namespace

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
            check_average_paths(opt->inputs, opt->output);
            check_same_heads(opt->inputs);
            const io::Checkpoint avg = io::average_checkpoints(opt->inputs);
            io::save_checkpoint(opt->output, avg);
            // One input: its weights alone (a weights-only copy), said as such.
            fmt::print("average: wrote {} ({} tensors, {})\n", opt->output, avg.model.size(),
                       opt->inputs.size() == 1 ? std::string("the weights of 1 checkpoint")
                                               : fmt::format("the mean of {} checkpoints", opt->inputs.size()));
            return 0;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
