#include "train/run_folder.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>

#include "data/task_data.h"

namespace tessera::train {

namespace fs = std::filesystem;

std::string weights_only_message(const std::string& path) {
  return fmt::format(
      "cannot resume from '{}': it holds weights only, no optimizer or training state (it is a final model or an "
      "average; resume from a checkpoint_<step>.h5)",
      path);
}

StepCheckpoints step_checkpoints(const fs::path& dir) {
  static const std::regex name(R"(checkpoint_(\d+)\.h5)");
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    std::int64_t step = 0;
    // A step past int64 (a stray file's name) is no checkpoint of a run's: not listed.
    if (entry.is_regular_file() && std::regex_match(file, m, name) &&
        std::from_chars(file.data() + m.position(1), file.data() + m.position(1) + m.length(1), step).ec == std::errc())
      out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A run without --resume into a folder holding another run's checkpoints would overwrite some of
// them and leave the rest, and a later --resume could pick up the other run's: refused. Each rank
// looks for itself; where the folder is not one shared folder, a rank may see a run that rank 0
// does not, and every rank refuses alike all the same (no rank goes on alone).
void check_no_earlier_run(const fs::path& dir, dist::Communicator* world) {
  std::vector<std::string> found;
  for (const auto& [step, path] : step_checkpoints(dir)) found.push_back(path.filename().string());
  for (const char* name : {"checkpoint_best.h5", "model.h5"})
    if (fs::exists(dir / name)) found.emplace_back(name);
  const int ranks = dist::count_ranks(!found.empty(), world);
  if (ranks == 0) return;
  // Rank 0 prints its message; a rank whose message differs prints its own (main.cpp).
  const bool on_rank_0 = dist::broadcast_u64(!found.empty(), world) != 0;
  if (found.empty())
    throw io::ConfigError(fmt::format(
        "output.dir '{}' already holds a run on {} of {} ranks, though not on {} (a run folder that is not one shared "
        "folder): train into another output.dir, or delete the earlier run's files on every machine",
        dir.string(), ranks, world->size(), on_rank_0 ? "this one" : "rank 0"));
  throw io::ConfigError(fmt::format(
      "output.dir '{}' already holds a run ({}{}): continue it with --resume, or train into another output.dir "
      "(or delete that one)",
      dir.string(), found.front(), found.size() > 1 ? fmt::format(" and {} more", found.size() - 1) : ""));
}

void check_shared_run_folder(const fs::path& dir, dist::Communicator* world, const dist::RankHosts& hosts) {
  if (world == nullptr || world->size() < 2) return;
  const std::uint64_t nonce =
      dist::broadcast_u64((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}(), world);
  const std::string contents = fmt::format("{:016x}", nonce);
  const fs::path token = dir / fmt::format(".shared_folder_check.{}", contents);
  if (world->rank() == 0) {
    std::ofstream out(token);
    out << contents;
    out.close();
    if (!out) fail("cannot write '{}': {}", token.string(), std::strerror(errno));
  }
  world->barrier();
  std::ifstream in(token);
  std::stringstream read;
  read << in.rdbuf();
  const std::int32_t sees = read.str() == contents ? 1 : 0;
  const Tensor all = world->all_gather(Tensor::from(std::vector<std::int32_t>{sees}, {1}));
  std::error_code ec;
  if (world->rank() == 0) fs::remove(token, ec);  // after every rank has looked (the all_gather)
  std::vector<int> blind;
  for (int r = 0; r < world->size(); ++r)
    if (all.data<std::int32_t>()[r] == 0) blind.push_back(r);
  if (!blind.empty())
    throw EveryRankError(fmt::format(
        "output.dir '{}' is not one folder that every host shares: {} do not see the file rank 0 (on {}) wrote there "
        "(a node-local disk?). Put output.dir on a file system every host mounts at the same path (NFS, Lustre, ...)",
        dir.string(), dist::name_ranks_with_hosts(hosts, blind), hosts.host.empty() ? "?" : hosts.host.front()));
}

// Why --resume alone cannot go on in `dir`, which holds no checkpoint_<step>.h5 (empty: it starts
// from scratch).
std::string resume_refusal(const fs::path& dir) {
  if (fs::exists(dir / "checkpoint_best.h5"))  // starting from scratch would overwrite it
    return fmt::format(
        "--resume: output.dir '{}' holds no checkpoint_<step>.h5 but a run's checkpoint_best.h5: resume from it with "
        "--resume {}, or train into another output.dir",
        dir.string(), (dir / "checkpoint_best.h5").string());
  if (fs::exists(dir / "model.h5"))  // weights only: nothing to resume from
    return fmt::format(
        "--resume: output.dir '{}' holds a finished run's model.h5 (weights only) and no checkpoint to resume from: "
        "train into another output.dir",
        dir.string());
  return {};
}

// A resume that cannot work is refused from the checkpoint's header, before minutes of data
// preparation: a weights-only file, or a model whose parameters would not fit this config's. (The
// vocabularies are checked with the data; Run::resume checks every tensor.)
void check_resumable(const io::RunConfig& cfg, const std::string& path) {
  const io::CheckpointHeader header = io::read_checkpoint_header(path);
  if (!header.full) fail("{}", weights_only_message(path));
  // The vocabularies' kind first: changing it changes model.share_embeddings too, and this says why.
  data::check_vocabulary_kind(io::load_vocabularies(path), cfg.data.joint_vocab, path);
  const io::RunConfig saved = io::RunConfig::parse(header.config_yaml, path);
  std::vector<std::string> differ;
  for (const io::KeyDifference& d : io::model_shape_differences(saved, cfg))
    differ.push_back(fmt::format("{} = {} there, {} in this config", d.key, d.first, d.second));
  if (!differ.empty())
    fail(
        "cannot resume from '{}': its model does not have this config's shape ({}); its weights would not fit. "
        "Resume with the run's own settings (its config.yaml) or train into a new output.dir",
        path, fmt::join(differ, "; "));
  // The weights fit, but the run could not go on as this config says: another head count splits
  // the same projections into other heads (another function), and another seed would be ignored
  // (the data order and dropout go on from the checkpoint's, as a bit-exact resume must).
  const std::map<std::string, std::string> why_not = {
      {"model.heads", "its weights would be split into other heads"},
      {"train.best_metric", "the best score so far, its step and train.patience's count are of the run's metric"},
      {"train.seed", "it would not apply: the data order and dropout go on from the checkpoint's"}};
  for (const io::KeyDifference& d : io::key_differences(saved, cfg, {"model.heads", "train.best_metric", "train.seed"}))
    differ.push_back(fmt::format("{} = {} there, {} in this config: {}", d.key, d.first, d.second, why_not.at(d.key)));
  if (!differ.empty())
    fail(
        "cannot resume from '{}' with another {}. Resume with the run's own settings (its config.yaml) or train "
        "into a new output.dir",
        path, fmt::join(differ, "; another "));
}

// A latest checkpoint that is damaged (a disk error, a copy cut short): the error names the newest
// earlier one (of `saved`, the folder's step checkpoints, oldest first) whose header reads, to
// resume from instead. Called while handling `e`; rethrows it as it is when there is none.
void rethrow_naming_earlier_checkpoint(const io::DamagedCheckpoint& e, const StepCheckpoints& saved) {
  for (auto it = saved.rbegin(); saved.size() > 1 && ++it != saved.rend();) {
    try {
      io::read_checkpoint_header(it->second.string());
    } catch (const Error&) {
      continue;
    }
    fail("{}; resume from an earlier checkpoint with --resume {}", e.what(), it->second.string());
  }
  throw;
}

// config.yaml: the effective config with each key's description, written through a temporary so
// that a full disk cannot leave half of it.
void write_effective_config(const io::RunConfig& cfg, const fs::path& dir) {
  const fs::path path = dir / "config.yaml", tmp = dir / "config.yaml.tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp);
    out << cfg.to_yaml(true);
    out.flush();
    if (!out.good()) {
      const int error = errno;  // of the open or of the write that failed
      out.close();
      fs::remove(tmp, ec);
      fail("cannot write '{}': {}", path.string(), std::strerror(error));
    }
  }
  fs::rename(tmp, path, ec);
  TESSERA_CHECK(!ec, "cannot write '{}': {}", path.string(), ec.message());
}

}  // namespace tessera::train
