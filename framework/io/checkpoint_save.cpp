// save_checkpoint: the whole file built in memory, then written, flushed and renamed into place.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/checkpoint.h"
#include "io/checkpoint_writer.h"
#include "tensor/allocator.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
using detail::H5Handle;
using detail::rename_into_place;
using detail::write_header;
using detail::write_state;
using detail::write_tensors;
using detail::write_vocabularies;
using detail::Writer;

std::size_t tensor_bytes(const TensorMap& tensors) {
  std::size_t n = 0;
  for (const auto& [name, t] : tensors) n += static_cast<std::size_t>(t.numel()) * sizeof(float);
  return n;
}

// The memory of an in-memory HDF5 file. It comes from the host cache, so a training run's
// periodic saves reuse pages already mapped instead of faulting in (and zeroing) fresh ones.
struct FileImage {
  void* data = nullptr;
  std::size_t capacity = 0;  // bytes allocated
  std::size_t size = 0;      // bytes of the file
  bool closed = false;       // HDF5 closed the file and handed the buffer over
  FileImage() = default;
  FileImage(const FileImage&) = delete;
  FileImage& operator=(const FileImage&) = delete;
  ~FileImage() { deallocate(data, Device::cpu); }

  void* grow(void* ptr, std::size_t bytes) {
    if (ptr == data && bytes <= capacity && ptr != nullptr) return ptr;
    void* fresh = allocate(bytes, Device::cpu);
    if (ptr != nullptr) std::memcpy(fresh, ptr, std::min(bytes, capacity));
    deallocate(data, Device::cpu);
    data = fresh;
    capacity = bytes;
    return fresh;
  }
};

// HDF5 core-driver callbacks over one FileImage; the buffer released on file close stays with
// the FileImage (written to disk from there, no copy).
H5FD_file_image_callbacks_t image_callbacks(FileImage* image) {
  H5FD_file_image_callbacks_t cb{};
  cb.image_malloc = [](size_t size, H5FD_file_image_op_t, void* udata) {
    return static_cast<FileImage*>(udata)->grow(nullptr, size);
  };
  cb.image_memcpy = [](void* dest, const void* src, size_t size, H5FD_file_image_op_t, void*) {
    return std::memcpy(dest, src, size);
  };
  cb.image_realloc = [](void* ptr, size_t size, H5FD_file_image_op_t, void* udata) {
    return static_cast<FileImage*>(udata)->grow(ptr, size);
  };
  cb.image_free = [](void*, H5FD_file_image_op_t op, void* udata) -> herr_t {
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) static_cast<FileImage*>(udata)->closed = true;
    return 0;  // the FileImage owns (and frees) the memory
  };
  cb.udata_copy = [](void* udata) { return udata; };
  cb.udata_free = [](void*) -> herr_t { return 0; };
  cb.udata = image;
  return cb;
}

// The end-of-file address recorded in an HDF5 superblock at the start of `p` (format spec,
// "Superblock": versions 0 and 1 keep it after the base and free-space addresses, versions 2 and
// 3 after the base and extension addresses); 0 when it cannot be read.
std::size_t superblock_end_of_file(const unsigned char* p, std::size_t n) {
  static constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (n < 64 || std::memcmp(p, kSignature, 8) != 0) return 0;
  const unsigned version = p[8];
  std::size_t at = 0;
  if (version <= 1) {
    if (p[13] != 8) return 0;  // size of offsets
    at = 24 + (version == 1 ? 4 : 0) + 2 * 8;
  } else if (version <= 3) {
    if (p[9] != 8) return 0;
    at = 12 + 2 * 8;
  } else {
    return 0;
  }
  std::uint64_t eof = 0;
  for (int i = 7; i >= 0; --i) eof = (eof << 8) | p[at + static_cast<std::size_t>(i)];  // little-endian
  return static_cast<std::size_t>(eof);
}

// Builds the whole HDF5 file in memory (HDF5's core driver, no backing store) into `image`.
// The HDF5 library never writes to disk itself: when a write to a full disk failed inside it,
// its file handle could not be closed any more and the process crashed at exit.
void build_image(const std::string& tmp, const Checkpoint& c, FileImage& image) {
  Writer w(tmp);
  // One allocation for all the data plus room for the metadata: no regrowth while writing.
  std::size_t data = tensor_bytes(c.model) + tensor_bytes(c.exp_avg) + tensor_bytes(c.exp_avg_sq);
  for (const auto& [name, bytes] : c.vocabularies) data += bytes.size();
  const std::size_t datasets = c.model.size() + c.exp_avg.size() + c.exp_avg_sq.size() + c.vocabularies.size();
  H5Handle fapl{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  H5FD_file_image_callbacks_t callbacks = image_callbacks(&image);
  w.check(H5Pset_fapl_core(fapl.id(), data + 4096 * datasets + (std::size_t{1} << 20), /*backing_store=*/0) >= 0 &&
              H5Pset_file_image_callbacks(fapl.id(), &callbacks) >= 0,
          "/ (in-memory file)");
  H5Handle file{H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose};
  w.check(file.valid(), "/ (in-memory file)");
  write_header(w, file.id(), c.step, c.config_yaml);
  write_tensors(w, file.id(), "model", "/model", c.model);
  if (!c.exp_avg.empty() || !c.exp_avg_sq.empty()) {
    H5Handle opt{w.group(file.id(), "optimizer"), H5Gclose};
    write_tensors(w, opt.id(), "exp_avg", "/optimizer/exp_avg", c.exp_avg);
    write_tensors(w, opt.id(), "exp_avg_sq", "/optimizer/exp_avg_sq", c.exp_avg_sq);
  }
  write_vocabularies(w, file.id(), c.vocabularies);
  if (c.state) write_state(w, file.id(), c.step, *c.state);
  w.check(H5Fflush(file.id(), H5F_SCOPE_GLOBAL) >= 0, "/ (flush)");
  w.check(file.close(), "/ (close)");
  w.check(image.closed && image.data != nullptr, "/ (the in-memory file was not handed over on close)");
  // The file ends at the superblock's end-of-file address; the driver's buffer is longer.
  image.size = superblock_end_of_file(static_cast<const unsigned char*>(image.data), image.capacity);
  w.check(image.size > 0 && image.size <= image.capacity, "/ (superblock)");
}

// Writes the bytes to `path` and flushes them to disk; throws with the system's reason.
void write_and_sync(const std::string& path, const FileImage& image) {
  constexpr std::size_t kWriteChunk = std::size_t{32} << 20;
  const char* bytes = static_cast<const char*>(image.data);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail("cannot write checkpoint '{}': {} (is the folder writable?)", path, std::strerror(errno));
  std::size_t done = 0;
  while (done < image.size) {
    const ssize_t n = ::write(fd, bytes + done, std::min<std::size_t>(image.size - done, kWriteChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      fail("cannot write checkpoint '{}': {} after {} of {} bytes (disk full?)", path, std::strerror(err), done,
           image.size);
    }
    // Start the disk writing this chunk now, while the next one is copied: fsync then waits
    // for the tail only.
    ::sync_file_range(fd, static_cast<off_t>(done), n, SYNC_FILE_RANGE_WRITE);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot write checkpoint '{}': flushing to disk failed: {}", path, std::strerror(err));
  }
  if (::close(fd) != 0) fail("cannot write checkpoint '{}': closing failed: {}", path, std::strerror(errno));
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  const fs::path final_path(path);
  if (final_path.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(final_path.parent_path(), ec);
    if (ec)
      fail("cannot write checkpoint '{}': cannot create folder '{}': {}", path, final_path.parent_path().string(),
           ec.message());
  }
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, with the file named
  const std::string tmp = path + ".tmp";
  try {
    FileImage image;
    build_image(tmp, ckpt, image);
    write_and_sync(tmp, image);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  rename_into_place(tmp, path);
}

}  // namespace tessera::io
