#include <fmt/core.h>

#include <filesystem>
#include <string>

#include "launch/commands.h"
#include "launch/process_grid.h"
#include "launch/schema.h"
#include "launch/trainer.h"

namespace tessera::launch {
namespace {

// `train --config RUN/config.yaml --resume` after RUN was moved or copied, or with a relative
// output.dir from another working directory: the config's output.dir names another folder, where
// --resume would start a new run from scratch (or go on with the original, not the copy). Refused,
// naming both; --set output.dir says which is meant (a fork from the latest checkpoint is
// --resume RUN/checkpoint_<step>.h5 with another output.dir).
void check_config_names_its_own_run(const io::Config& cfg, const std::string& config_path) {
  namespace fs = std::filesystem;
  const fs::path config_dir =
      fs::path(config_path).parent_path().empty() ? fs::path(".") : fs::path(config_path).parent_path();
  if (fs::path(config_path).filename() != "config.yaml" || cfg.origin("output.dir").starts_with("--set")) return;
  std::error_code ec;
  const bool holds_run = !step_checkpoints(config_dir).empty() || fs::exists(config_dir / "model.h5", ec) ||
                         fs::exists(config_dir / "checkpoint_best.h5", ec);
  const std::string output_dir = cfg.string("output.dir");
  if (!holds_run || fs::equivalent(config_dir, output_dir, ec)) return;
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
  // An empty path (--config "$CFG" with CFG unset) is refused, not read as "no config file".
  cmd->add_option("--config,-c", opt->config, "YAML experiment config; keys not given keep their defaults")
      ->check(CLI::Validator(
          [](const std::string& path) { return path.empty() ? std::string("the path is empty") : std::string(); },
          "FILE"));
  cmd->add_option("--set", opt->overrides, "Override one key, e.g. --set model.layers=2 (repeatable)");
  cmd->add_flag("--print-config", opt->print_config,
                "Print the effective config with each key's description and range, then exit (each key is checked "
                "alone; combinations of keys when training starts)");
  CLI::Option* resume = cmd->add_option("--resume", opt->resume_path,
                                        "Continue an interrupted run: from PATH, or without a value from the latest "
                                        "checkpoint_<step>.h5 in output.dir (none there: start from scratch)")
                            ->expected(0, 1);
  return {cmd, [opt, resume] {
            const io::Config cfg = io::Config::load(tessera_schema(), opt->config, opt->overrides);
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
