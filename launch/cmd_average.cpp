#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "launch/commands.h"
#include "models/from_config.h"

namespace tessera::launch {
namespace {

// The same file twice would weigh double, silently; writing over an input (a full checkpoint,
// say) would replace it with weights only. Both are refused before anything is read. Returns the
// file to write: a symbolic link's target (the link stays a link), never a device or a FIFO (the
// temporary renamed over it would replace /dev/null itself, run as root).
std::string check_average_paths(const std::vector<std::string>& inputs, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (output == "-")  // translate's and score's name for standard output
    fail(
        "average: the output '-' would be a file named '-': a checkpoint cannot go to standard output (./- names "
        "such a file)");
  std::string target = output;
  if (fs::is_symlink(output, ec)) {
    target = fs::exists(output, ec) ? fs::canonical(output, ec).string() : link_destination(output).string();
    if (ec || target.empty())  // a link to a pipe, say (/dev/stdout)
      fail(
          "average: the output '{}' is a symbolic link that does not lead to a file path ({}): give the path of a "
          "file to write",
          output, ec ? ec.message() : std::string("empty"));
  }
  const fs::file_status status = fs::status(target, ec);
  if (fs::exists(status) && !fs::is_regular_file(status))
    fail("average: the output '{}' is not a regular file{}: give the path of a file to write", output,
         fs::is_directory(status) ? " (a folder)" : " (a device, FIFO or socket)");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (fs::equivalent(inputs[i], inputs[j], ec))
        fail("average: '{}' and '{}' are the same file: each checkpoint counts once", inputs[j], inputs[i]);
    if (fs::exists(output, ec) && fs::equivalent(inputs[i], output, ec))
      fail("average: the output '{}' is the input '{}': write the average to another file", output, inputs[i]);
    // The output is written through "<file>.tmp" (see io::save_checkpoint), which replaces what is there.
    if (fs::equivalent(inputs[i], target + ".tmp", ec))
      fail(
          "average: the input '{}' is the temporary file '{}.tmp' that the output is written through: write the "
          "average to another file",
          inputs[i], target);
  }
  check_can_create("average", target);
  return target;
}

// Checkpoints of other models are refused before their weights are read: another shape (a mean of
// same-shaped tensors of a synthetic and a corpus task's model is no model of either), or another
// model.heads (shapes cannot tell how the attention weights split into heads).
void check_same_model(const std::vector<std::string>& inputs) {
  const auto config_of = [](const std::string& path) {
    return io::RunConfig::parse(io::read_checkpoint_header(path).config_yaml, path + ":/config");
  };
  const io::RunConfig first = config_of(inputs.front());
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    const io::RunConfig other = config_of(inputs[i]);
    std::vector<std::string> differ;
    std::vector<io::KeyDifference> keys = io::model_shape_differences(other, first);
    // Synthetic tasks share a shape (a resume may change one into another): not a mean.
    if (std::none_of(keys.begin(), keys.end(), [](const io::KeyDifference& d) { return d.key == "data.task"; })) {
      const std::vector<io::KeyDifference> task = io::key_differences(other, first, {"data.task"});
      keys.insert(keys.end(), task.begin(), task.end());
    }
    for (const io::KeyDifference& d : keys)
      differ.push_back(fmt::format("{} = {} there, {} in the first", d.key, d.first, d.second));
    if (other.model.heads != first.model.heads)
      differ.push_back(fmt::format("model.heads = {} there, {} in the first: the same weights split into other heads",
                                   other.model.heads, first.model.heads));
    if (differ.empty()) continue;
    fail("average: '{}' is another model than '{}' ({}): the mean of their weights is a model of neither", inputs[i],
         inputs.front(), fmt::join(differ, "; "));
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
            const std::string target = check_average_paths(opt->inputs, opt->output);
            check_same_model(opt->inputs);
            Progress progress("average: read", "checkpoints", std::ssize(opt->inputs));
            const io::Checkpoint avg = io::average_checkpoints(opt->inputs, &progress);
            progress.finish();
            io::save_checkpoint(target, avg);
            // One input: its weights alone (a weights-only copy), said as such.
            fmt::print("average: wrote {} ({} tensors, {})\n", opt->output, avg.model.size(),
                       opt->inputs.size() == 1 ? std::string("the weights of 1 checkpoint")
                                               : fmt::format("the mean of {} checkpoints", opt->inputs.size()));
            return 0;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
