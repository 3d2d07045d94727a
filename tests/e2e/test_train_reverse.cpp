// End to end: configs/reverse.yaml trains the Transformer on sequence reversal (lengths 10-20,
// 20 symbols) to >= 99% exact-match greedy accuracy. The run is decided by its step count
// (train.max_steps in the config), never by a timer. CTest runs it under mpirun -np 2 as two
// data-parallel replicas (about 2 minutes on 2 cores); alone it runs as one process.
#include <gtest/gtest.h>

#include "dist/launcher.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "train/trainer.h"

namespace tessera {
namespace {

TEST(TrainE2E, ReverseTaskReachesNinetyNinePercentExactMatch) {
  const std::string config = std::string(TESSERA_SOURCE_DIR) + "/configs/reverse.yaml";
  const io::RunConfig cfg = io::RunConfig::load(
      config, {"output.dir=" + std::string(TESSERA_E2E_DIR) + "/reverse",
               "parallel.data=" + std::to_string(dist::launched_by_mpi() ? dist::launcher_size() : 1)});
  const train::TrainResult r = train::run_training(cfg);
  EXPECT_EQ(r.steps, cfg.train.max_steps);
  EXPECT_GE(r.valid_accuracy, 0.99) << "exact-match accuracy on " << cfg.data.synthetic_valid_size
                                    << " held-out sequences";
  EXPECT_LT(r.valid_ppl, 1.05);
  // The saved weights load back with the run's config.
  const io::Checkpoint w = io::load_checkpoint(r.checkpoint);
  EXPECT_EQ(w.step, r.steps);
  EXPECT_NE(w.config_yaml.find("task: reverse"), std::string::npos);
}

}  // namespace
}  // namespace tessera
