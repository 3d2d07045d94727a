// One train per run folder: a second lock on output.dir is refused, naming the holder, and the
// folder is free again once the holder ends. (Across processes, and after a kill -9, in
// tests/e2e/checkpoint_files.sh.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "train/run_folder_lock.h"
#include "unit/test_util.h"

namespace tessera {
namespace {

using testing::error_of;
using testing::TempDir;

std::string read(const std::string& path) {
  std::ostringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

TEST(RunFolderLock, ASecondLockIsRefusedNamingTheHolderUntilTheFirstEnds) {
  TempDir dir;
  const std::filesystem::path folder = dir.path("run");
  std::filesystem::create_directories(folder);
  std::optional<train::RunFolderLock> first(std::in_place, folder);
  ASSERT_TRUE(first->locked());
  const std::string holder = read(dir.path("run/train.lock"));
  EXPECT_EQ(holder.rfind(fmt::format("pid {} on host ", ::getpid()), 0), 0u) << holder;
  EXPECT_NE(holder.find(", started 20"), std::string::npos) << holder;

  const std::string refusal = error_of([&] { train::RunFolderLock second(folder); });
  EXPECT_EQ(refusal, fmt::format("output.dir '{}' is in use by another train ({}, as its {} says): wait for it to "
                                 "end, or train into another output.dir",
                                 folder.string(), holder.substr(0, holder.size() - 1), dir.path("run/train.lock")));
  // The refused one left the holder's name as it was.
  EXPECT_EQ(read(dir.path("run/train.lock")), holder);

  first.reset();
  train::RunFolderLock again(folder);
  EXPECT_TRUE(again.locked());
}

TEST(RunFolderLock, AFolderThatCannotHoldTheLockFileIsNamed) {
  TempDir dir;
  const std::string message = error_of([&] { train::RunFolderLock lock(dir.path("no_such_folder")); });
  EXPECT_NE(message.find("cannot create the lock file '" + dir.path("no_such_folder/train.lock") + "'"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace tessera
