#include "launch/commands.h"
#include "launch/demo_train.h"

namespace tessera::launch {

Command add_train_command(CLI::App& parent) {
  auto demo = std::make_shared<DemoOptions>();
  CLI::App* train = parent.add_subcommand(
      "train", "Train a model. Until the Transformer lands: a small MLP demo on a synthetic task (no data, no GPU)");
  train->add_option("--steps", demo->steps, "Training steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  train->add_option("--hidden", demo->hidden, "Hidden units")->check(CLI::Range(2, 65536))->capture_default_str();
  train->add_option("--batch", demo->batch, "Points per batch")->check(CLI::Range(1, 1000000))->capture_default_str();
  train->add_option("--lr", demo->lr, "Adam learning rate")->check(CLI::Range(1e-8, 10.0))->capture_default_str();
  train->add_option("--seed", demo->seed, "Random seed")->capture_default_str();
  return {train, [demo] { return run_demo_training(*demo); }};
}

}  // namespace tessera::launch
