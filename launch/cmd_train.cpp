#include <fmt/core.h>

#include "launch/commands.h"
#include "launch/process_grid.h"
#include "launch/schema.h"
#include "launch/trainer.h"

namespace tessera::launch {

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
            const TrainResult result =
                run_training(cfg, {.resume = resume->count() > 0, .resume_path = opt->resume_path});
            // Stopped by SIGTERM / SIGINT after checkpointing: the shell convention for "killed by signal".
            return result.stop_signal != 0 ? 128 + result.stop_signal : 0;
          }};
}

}  // namespace tessera::launch
