// One train per run folder: a second `tessera train` into an output.dir that a running train uses
// (the same job submitted twice, a resume started before the old job ended) is refused, instead of
// both appending to metrics.jsonl, replacing each other's checkpoints and removing each other's
// checkpoint temporaries.
#pragma once

#include <filesystem>
#include <string>

namespace tessera::train {

// An exclusive lock on <dir>/train.lock for as long as the object lives. An open-file-description
// lock: the kernel drops it when the process ends however it ends (kill -9 included), and it
// excludes a second lock taken in the same process too (where the file system has no such locks,
// a POSIX lock, which does not). The holder's pid, host and start time written into the file only
// name the holder in the refusal. On a file system without locks a warning is printed and the
// folder is used unlocked. Limits no process can see: mounts that lock per node only (Lustre
// localflock, NFS local_lock, BeeGFS without global locks) do not exclude a train on another node,
// and after a node crash an NFS server may hold the lock until its lease ends.
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::filesystem::path& dir);  // throws tessera::Error when in use
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  bool locked() const { return fd_ >= 0; }
  // Removes the lock file while still holding it (a refused start removing the folder it created):
  // a train that opens the name afterwards creates and locks a new file. Removed after the release,
  // the old file could be locked by one that had opened it before, and a new one by another.
  void remove_file();

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace tessera::train
