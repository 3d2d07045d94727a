// A run's folder (output.dir): its step checkpoints, the checks a start makes before it trains
// into it (no other run there, a checkpoint that can be resumed), what a refused start leaves
// behind, and its config.yaml.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/task_data.h"
#include "dist/communicator.h"
#include "dist/hosts.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "train/run_folder_lock.h"

namespace tessera::train {

using StepCheckpoints = std::vector<std::pair<std::int64_t, std::filesystem::path>>;

// The step checkpoints (checkpoint_<step>.h5) in a run's folder, by step, oldest first.
StepCheckpoints step_checkpoints(const std::filesystem::path& dir);

// "cannot resume from PATH: it holds weights only ..."
std::string weights_only_message(const std::string& path);

// A run without --resume into a folder holding another run's checkpoints would overwrite some of
// them and leave the rest, and a later --resume could pick up the other run's: refused. Each rank
// looks for itself; where the folder is not one shared folder, a rank may see a run that rank 0
// does not, and every rank refuses alike all the same (no rank goes on alone).
void check_no_earlier_run(const std::filesystem::path& dir, dist::Communicator* world);

// Every rank must see the one output.dir rank 0 made (a shared file system): rank 0 writes a file
// with a random name and contents there, the others read it back. Where some do not (a node-local
// folder of the same name), every rank throws one EveryRankError naming those ranks and their hosts,
// before any checkpoint is written into folders that differ. Collective.
void check_shared_run_folder(const std::filesystem::path& dir, dist::Communicator* world, const dist::RankHosts& hosts);

// Why --resume alone cannot go on in `dir`, which holds no checkpoint_<step>.h5 (empty: it starts
// from scratch).
std::string resume_refusal(const std::filesystem::path& dir);

// A resume that cannot work is refused from the checkpoint's header, before minutes of data
// preparation: a weights-only file, or a model whose parameters would not fit this config's. (The
// vocabularies are checked with the data; Run::resume checks every tensor.)
void check_resumable(const io::RunConfig& cfg, const std::string& path);

// A latest checkpoint that is damaged (a disk error, a copy cut short): the error names the newest
// earlier one (of `saved`, the folder's step checkpoints, oldest first) whose header reads, to
// resume from instead. Called while handling `e`; rethrows it as it is when there is none.
[[noreturn]] void rethrow_naming_earlier_checkpoint(const io::DamagedCheckpoint& e, const StepCheckpoints& saved);

// config.yaml: the effective config with each key's description, written through a temporary so
// that a full disk cannot leave half of it.
void write_effective_config(const io::RunConfig& cfg, const std::filesystem::path& dir);

// What a start creates, removed when it is refused later (no validation pairs left, a vocabulary
// that does not fit the model, say) unless keep() was called. Rank 0's:
// - the vocabulary files (P.model, P.vocab) it trains on first use or restores from its checkpoint:
//   left there, the next start would take them for its trained vocabulary, whatever its text or
//   data.vocab_type;
// - output.dir, when its own mkdir made it (a folder another start made meanwhile is theirs), with
//   its lock file (removed while still held) and an empty metrics.jsonl, and only if nothing else
//   is left in it: never a file of anyone else's. Parent folders it made stay.
class StartLeftovers {
 public:
  explicit StartLeftovers(std::optional<RunFolderLock>& lock) : lock_(lock) {}
  ~StartLeftovers() {
    std::error_code ec;
    for (const std::string& file : vocabularies_) std::filesystem::remove(file, ec);
    if (folder_.empty()) return;
    if (lock_) lock_->remove_file();
    if (std::filesystem::file_size(folder_ / "metrics.jsonl", ec) == 0 && !ec)
      std::filesystem::remove(folder_ / "metrics.jsonl", ec);
    std::filesystem::remove(folder_, ec);  // fails, leaving it, unless empty
  }
  StartLeftovers(const StartLeftovers&) = delete;
  StartLeftovers& operator=(const StartLeftovers&) = delete;

  void created_folder(const std::filesystem::path& dir) { folder_ = dir; }
  // The vocabulary files the config names that do not exist yet (before the data is loaded).
  void note_new_vocabularies(const io::RunConfig& cfg) {
    if (cfg.data.synthetic()) return;
    const data::VocabPaths paths = data::vocab_paths(cfg);
    for (const std::string& model : {paths.src, paths.tgt}) {
      const std::string prefix = model.ends_with(".model") ? model.substr(0, model.size() - 6) : model;
      for (const std::string& file : {model, prefix + ".vocab"}) {
        std::error_code ec;
        if (!std::filesystem::exists(file, ec) && !ec &&
            std::find(vocabularies_.begin(), vocabularies_.end(), file) == vocabularies_.end())
          vocabularies_.push_back(file);
      }
    }
  }
  void keep() {
    vocabularies_.clear();
    folder_.clear();
  }

 private:
  std::optional<RunFolderLock>& lock_;
  std::vector<std::string> vocabularies_;
  std::filesystem::path folder_;
};

}  // namespace tessera::train
