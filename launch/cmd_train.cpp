#include <fmt/core.h>

#include <filesystem>
#include <string>

#include "dist/launcher.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "launch/commands.h"
#include "models/from_config.h"
#include "train/trainer.h"

namespace tessera::launch {

using dist::launcher_rank;
using train::run_training;
using train::step_checkpoints;
using train::TrainResult;
namespace {

// `train --config RUN/config.yaml --resume` after RUN was moved or copied, or with a relative
// output.dir from another working directory: the config's output.dir names another folder, where
// --resume would start a new run from scratch (or go on with the original, not the copy). Refused,
// naming both, when RUN's latest step checkpoint (what --resume would continue) was written by a
// run with that same output.dir, so the config is that run's own; --set output.dir says which
// folder is meant (a fork: --resume RUN/checkpoint_<step>.h5 with another output.dir).
void check_config_names_its_own_run(const io::RunConfig& cfg, const std::string& config_path) {
  namespace fs = std::filesystem;
  if (fs::path(config_path).filename() != "config.yaml" || cfg.source().origin("output.dir").starts_with("--set"))
    return;
  const fs::path config_dir =
      fs::path(config_path).has_parent_path() ? fs::path(config_path).parent_path() : fs::path(".");
  const auto saved = step_checkpoints(config_dir);
  const std::string output_dir = cfg.output.dir;
  std::error_code ec;
  if (saved.empty() || fs::equivalent(config_dir, output_dir, ec)) return;
  std::string run_output_dir;
  try {
    const io::CheckpointHeader header = io::read_checkpoint_header(saved.back().second.string());
    run_output_dir = io::RunConfig::parse(header.config_yaml, saved.back().second.string(), {}).output.dir;
  } catch (const Error&) {
    return;  // an unreadable checkpoint is the resume's to report
  }
  if (run_output_dir != output_dir) return;  // a config of another run beside these checkpoints
  throw EveryRankError(fmt::format(
      "train --resume: '{}' is the config of the run in '{}' (its checkpoints are there), but its output.dir is "
      "'{}'{}: the folder was moved or copied, or output.dir is relative to another working directory; to continue "
      "the run where it is, add --set output.dir='{}'",
      config_path, config_dir.string(), output_dir, fs::exists(output_dir, ec) ? "" : " (no such folder)",
      config_dir.string()));
}

}  // namespace

Command add_train_command(CLI::App& parent) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    bool print_config = false;
    std::string resume_path;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand("train", "Train a Transformer from a YAML config (see configs/)");
  // An empty path (--config "$CFG" with CFG unset) never gets here: main refuses empty arguments.
  cmd->add_option("--config,-c", opt->config, "YAML experiment config; keys not given keep their defaults")
      ->type_name("TEXT:FILE");
  cmd->add_option("--set", opt->overrides, "Override one key, e.g. --set model.layers=2 (repeatable)");
  cmd->add_flag("--print-config", opt->print_config,
                "Print the effective config with each key's description and range, then exit (each key is checked "
                "alone; combinations of keys when training starts)");
  CLI::Option* resume = cmd->add_option("--resume", opt->resume_path,
                                        "Continue an interrupted run: from PATH, or without a value from the latest "
                                        "checkpoint_<step>.h5 in output.dir (none there: start from scratch)")
                            ->expected(0, 1);
  return {cmd, [opt, resume] {
            const io::RunConfig cfg = io::RunConfig::load(opt->config, opt->overrides);
            if (opt->print_config) {
              if (launcher_rank() == 0) fmt::print("{}", cfg.to_yaml(true));  // once under mpirun
              return 0;
            }
            if (resume->count() > 0 && opt->resume_path.empty() && !opt->config.empty())
              check_config_names_its_own_run(cfg, opt->config);
            const TrainResult result =
                run_training(cfg, {.resume = resume->count() > 0, .resume_path = opt->resume_path});
            // Stopped by SIGTERM / SIGINT after checkpointing: the shell convention for "killed by signal".
            return result.stop_signal != 0 ? 128 + result.stop_signal : 0;
          }};
}

}  // namespace tessera::launch
