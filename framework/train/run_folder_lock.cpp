#include "train/run_folder_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "common/error.h"

namespace tessera::train {
namespace {

// F_OFD_SETLK where the kernel and file system have it (Linux 3.15+), else a process-wide POSIX
// lock; false with errno EAGAIN or EACCES when another process holds it.
bool try_lock(int fd) {
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file
#ifdef F_OFD_SETLK
  struct flock ofd = whole;  // fcntl may write into it
  if (::fcntl(fd, F_OFD_SETLK, &ofd) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
#endif
  return ::fcntl(fd, F_SETLK, &whole) == 0;
}

std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string holder(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? std::string("a process that has not yet written its name") : holder;
}

std::string this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[64] = {};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
  return fmt::format("pid {} on host {}, started {}", ::getpid(), host, when);
}

}  // namespace

RunFolderLock::RunFolderLock(const std::filesystem::path& dir) {
  const std::string path = (dir / "train.lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) fail("cannot create the lock file '{}': {}", path, std::strerror(errno));
  if (!try_lock(fd)) {
    const int error = errno;
    if (error == EAGAIN || error == EACCES) {
      const std::string holder = holder_of(fd);
      ::close(fd);
      fail(
          "output.dir '{}' is in use by another train ({}, as its {} says): wait for it to end, or train into "
          "another output.dir",
          dir.string(), holder, path);
    }
    ::close(fd);
    print_to_stderr("warning: cannot lock '{}' ({}): a second train into output.dir '{}' would not be refused\n", path,
                    std::strerror(error), dir.string());
    return;
  }
  fd_ = fd;
  path_ = path;
  const std::string name = this_process() + "\n";
  // Who holds it, for a refusal's message only: a failed write loses nothing else.
  const bool named = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, name.data(), name.size(), 0) > 0;
  (void)named;
}

void RunFolderLock::remove_file() {
  if (fd_ >= 0) ::unlink(path_.c_str());
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new holder)
}

}  // namespace tessera::train
