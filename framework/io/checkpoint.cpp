#include "io/checkpoint.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <isa-l/crc.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/fault_injection.h"
#include "common/hash.h"
#include "tensor/allocator.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

// Closes an HDF5 handle at scope exit (close() closes it earlier and reports failure).
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close_fn)(hid_t)) : id_(id), close_(close_fn) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), close_(other.close_) {}
  ~H5Handle() { close(); }
  bool close() {
    const bool ok = id_ < 0 || close_(id_) >= 0;
    id_ = -1;
    return ok;
  }
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// The innermost HDF5 error description (e.g. "truncated file: eof = 96, ..."), for our messages.
std::string h5_error() {
  std::string text;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* err, void* out) -> herr_t {
        if (n == 0 && err->desc != nullptr) *static_cast<std::string*>(out) = err->desc;
        return 0;
      },
      &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "" : " (HDF5: " + text + ")";
}

// ---- writing

// A rank that fails in the middle of a parallel-HDF5 save must not unwind: closing the datasets and
// the file are collective calls, and the other ranks wait in another one (a full disk on one rank
// hung the job). It removes the temporary file, says why, and ends the job, as any error on one rank
// does; the earlier checkpoints stay as they were.
[[noreturn]] void abort_sharded_save(const std::string& tmp, const std::string& message) {
  std::error_code ec;
  fs::remove(tmp, ec);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fflush(stdout);
  std::fprintf(stderr, "tessera: error on rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

class Writer {
 public:
  // collective: a failure ends the job at once (abort_sharded_save) instead of throwing.
  explicit Writer(std::string path, bool collective = false) : path_(std::move(path)), collective_(collective) {}

  void string_attr(hid_t obj, const char* name, const std::string& value) {
    H5Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(type.id(), std::max<std::size_t>(value.size(), 1));
    H5Handle space{H5Screate(H5S_SCALAR), H5Sclose};
    H5Handle attr{H5Acreate2(obj, name, type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    check(attr.valid() && H5Awrite(attr.id(), type.id(), value.empty() ? "" : value.c_str()) >= 0, name);
  }
  void int_attr(hid_t obj, const char* name, std::int64_t value) {
    scalar_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
  }
  void real_attr(hid_t obj, const char* name, double value) {
    scalar_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
  }
  hid_t group(hid_t parent, const char* name) {
    const hid_t g = H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    check(g >= 0, name);
    return g;
  }
  // One float32 dataset with its checksum attribute.
  void tensor(hid_t group, const std::string& group_path, const std::string& name, const Tensor& value) {
    const Tensor v = value.to(Device::cpu).to(DType::f32);
    const std::string where = group_path + "/" + name;
    std::vector<hsize_t> dims(v.shape().begin(), v.shape().end());
    H5Handle space{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
    H5Handle ds{H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose};
    check(ds.valid(), where);
    check(H5Dwrite(ds.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.raw_data()) >= 0, where);
    int_attr(ds.id(), "crc32", checksum(v.raw_data(), static_cast<std::size_t>(v.numel()) * sizeof(float)));
    check(ds.close(), where);
  }
  // One uint8 dataset holding `value`, with its checksum attribute. In a parallel save every rank
  // creates it and only those with write_data fill it.
  void bytes(hid_t group, const std::string& group_path, const std::string& name, const std::string& value,
             bool write_data = true, hid_t dxpl = H5P_DEFAULT) {
    const std::string where = group_path + "/" + name;
    const hsize_t n = value.size();
    H5Handle fspace{H5Screate_simple(1, &n, nullptr), H5Sclose};
    H5Handle mspace{H5Screate_simple(1, &n, nullptr), H5Sclose};
    H5Handle ds{H5Dcreate2(group, name.c_str(), H5T_STD_U8LE, fspace.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose};
    check(ds.valid(), where);
    if (!write_data) {
      H5Sselect_none(fspace.id());
      H5Sselect_none(mspace.id());
    }
    check(H5Dwrite(ds.id(), H5T_NATIVE_UINT8, mspace.id(), fspace.id(), dxpl, value.data()) >= 0, where);
    int_attr(ds.id(), "crc32", checksum(value.data(), value.size()));
    check(ds.close(), where);
  }
  void check(bool ok, const std::string& what) const {
    if (ok) return;
    const std::string message = fmt::format(
        "cannot write checkpoint '{}': writing '{}' failed (disk full or out of memory?){}", path_, what, h5_error());
    if (collective_) abort_sharded_save(path_, message);
    fail("{}", message);
  }

 private:
  void scalar_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* value) {
    H5Handle space{H5Screate(H5S_SCALAR), H5Sclose};
    H5Handle attr{H5Acreate2(obj, name, file_type, space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    check(attr.valid() && H5Awrite(attr.id(), mem_type, value) >= 0, name);
  }
  std::string path_;
  bool collective_;
};

// The CRC-32 of the file's step (8 bytes, host byte order) followed by the config's bytes, stored
// as the root's "crc32": the config decides the model's shape and the data it reads, so an edited
// `heads: 4` must be refused, not translated with silently.
std::uint32_t header_checksum(std::int64_t step, const std::string& config_yaml) {
  std::string bytes(sizeof(step), '\0');
  std::memcpy(bytes.data(), &step, sizeof(step));
  bytes += config_yaml;
  return checksum(bytes.data(), bytes.size());
}

void write_header(Writer& w, hid_t file, std::int64_t step, const std::string& config_yaml) {
  w.int_attr(file, "format_version", kCheckpointFormatVersion);
  w.int_attr(file, "step", step);
  w.string_attr(file, "config", config_yaml);
  w.string_attr(file, "created_by", "tessera");
  w.int_attr(file, "crc32", header_checksum(step, config_yaml));
}

// The CRC-32 of the file's step and the training state's fields (8 bytes each, in declaration
// order, in the host's byte order: little-endian on x86 and ARM), stored as /train's "crc32": a
// changed attribute (Adam's t, the data position) is caught as a changed dataset is, instead of
// resuming a subtly different run.
std::uint32_t state_checksum(std::int64_t file_step, const TrainingState& s) {
  const auto u = [](auto v) { return static_cast<std::uint64_t>(v); };
  const auto bits = [](double v) { return std::bit_cast<std::uint64_t>(v); };
  const std::uint64_t words[] = {u(file_step),
                                 u(s.step),
                                 u(s.epoch),
                                 u(s.position),
                                 s.shuffle_seed,
                                 s.dropout_seed,
                                 u(s.optimizer_step),
                                 bits(s.learning_rate),
                                 bits(s.elapsed_seconds),
                                 bits(s.best_valid),
                                 u(s.best_valid_step),
                                 u(s.validations_since_best),
                                 u(s.last_validated_step),
                                 s.train_fingerprint};
  return checksum(words, sizeof(words));
}

void write_state(Writer& w, hid_t file, std::int64_t file_step, const TrainingState& s) {
  H5Handle g{w.group(file, "train"), H5Gclose};
  w.int_attr(g.id(), "crc32", state_checksum(file_step, s));
  w.int_attr(g.id(), "step", s.step);
  w.int_attr(g.id(), "epoch", s.epoch);
  w.int_attr(g.id(), "position", s.position);
  w.int_attr(g.id(), "shuffle_seed", static_cast<std::int64_t>(s.shuffle_seed));
  w.int_attr(g.id(), "dropout_seed", static_cast<std::int64_t>(s.dropout_seed));
  w.int_attr(g.id(), "optimizer_step", s.optimizer_step);
  w.real_attr(g.id(), "learning_rate", s.learning_rate);
  w.real_attr(g.id(), "elapsed_seconds", s.elapsed_seconds);
  w.real_attr(g.id(), "best_valid", s.best_valid);
  w.int_attr(g.id(), "best_valid_step", s.best_valid_step);
  w.int_attr(g.id(), "validations_since_best", s.validations_since_best);
  w.int_attr(g.id(), "last_validated_step", s.last_validated_step);
  w.int_attr(g.id(), "train_fingerprint", static_cast<std::int64_t>(s.train_fingerprint));
}

void write_tensors(Writer& w, hid_t parent, const char* name, const std::string& group_path, const TensorMap& tensors) {
  H5Handle g{w.group(parent, name), H5Gclose};
  for (const auto& [key, value] : tensors) w.tensor(g.id(), group_path, key, value);
}

// /vocab/<name>, when the run has vocabularies (see Checkpoint::vocabularies).
void write_vocabularies(Writer& w, hid_t file, const std::map<std::string, std::string>& vocabularies,
                        bool write_data = true, hid_t dxpl = H5P_DEFAULT) {
  if (vocabularies.empty()) return;
  H5Handle g{w.group(file, "vocab"), H5Gclose};
  for (const auto& [name, bytes] : vocabularies) w.bytes(g.id(), "/vocab", name, bytes, write_data, dxpl);
}

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

// Flushes a folder's entries (a rename) to disk; best effort.
void sync_folder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// ---- reading

class Reader {
 public:
  Reader(std::string path, hid_t file) : path_(std::move(path)), file_(file) {}

  std::string string_attr(hid_t obj, const char* name) const {
    const H5Handle attr = open_single_valued_attr(obj, name);
    H5Handle type{H5Aget_type(attr.id()), H5Tclose};
    check(H5Tget_class(type.id()) == H5T_STRING && H5Tis_variable_str(type.id()) == 0,
          fmt::format("attribute '{}' is not a string of fixed length", name));
    const std::size_t size = H5Tget_size(type.id());
    hsize_t file_bytes = 0;  // a damaged type can claim gigabytes: refused before the memory is taken
    check_intact(H5Fget_filesize(file_, &file_bytes) < 0 || size <= file_bytes,
                 fmt::format("attribute '{}' claims {} bytes, more than the file's {}: the file is corrupted", name,
                             size, file_bytes));
    std::string s(size, '\0');
    H5Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id(), size);
    check(H5Aread(attr.id(), mem.id(), s.data()) >= 0, fmt::format("cannot read attribute '{}'", name));
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
  }
  std::int64_t int_attr(hid_t obj, const char* name) const {
    std::int64_t v = 0;
    scalar_attr(obj, name, H5T_NATIVE_INT64, &v);
    return v;
  }
  double real_attr(hid_t obj, const char* name) const {
    double v = 0;
    scalar_attr(obj, name, H5T_NATIVE_DOUBLE, &v);
    return v;
  }
  bool has(hid_t parent, const std::string& name) const { return H5Lexists(parent, name.c_str(), H5P_DEFAULT) > 0; }
  bool has_attr(hid_t obj, const char* name) const { return H5Aexists(obj, name) > 0; }

  // The names in the group at `group_path`, sorted.
  std::vector<std::string> names(const std::string& group_path) const {
    check(has(file_, group_path), fmt::format("group '{}' is missing", group_path));
    H5Handle group{H5Gopen2(file_, group_path.c_str(), H5P_DEFAULT), H5Gclose};
    check(group.valid(), fmt::format("cannot open group '{}'", group_path));
    H5G_info_t info;
    check(H5Gget_info(group.id(), &info) >= 0, fmt::format("cannot list group '{}'", group_path));
    std::vector<std::string> out;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t len = H5Lget_name_by_idx(group.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      check(len > 0, fmt::format("cannot list group '{}'", group_path));
      std::string name(static_cast<std::size_t>(len) + 1, '\0');
      H5Lget_name_by_idx(group.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
      name.resize(static_cast<std::size_t>(len));
      out.push_back(std::move(name));
    }
    return out;
  }

  // Every dataset of the group at `group_path`, each checked against its CRC-32.
  TensorMap tensors(const std::string& group_path) const {
    TensorMap out;
    for (const std::string& name : names(group_path)) out.emplace(name, dataset(group_path, name));
    return out;
  }

  // The uint8 datasets of the group at `group_path` as byte strings, each checked against its
  // CRC-32; none when the file has no such group.
  std::map<std::string, std::string> byte_strings(const std::string& group_path) const {
    std::map<std::string, std::string> out;
    if (!has(file_, group_path)) return out;
    for (const std::string& name : names(group_path)) {
      const std::string where = group_path + "/" + name;
      H5Handle ds{H5Dopen2(file_, where.c_str(), H5P_DEFAULT), H5Dclose};
      check(ds.valid(), fmt::format("cannot open dataset '{}'", where));
      H5Handle type{H5Dget_type(ds.id()), H5Tclose};
      H5Handle space{H5Dget_space(ds.id()), H5Sclose};
      check(H5Tget_class(type.id()) == H5T_INTEGER && H5Tget_size(type.id()) == 1 &&
                H5Sget_simple_extent_ndims(space.id()) == 1,
            fmt::format("dataset '{}' is not a string of bytes", where));
      const hsize_t n = checked_dims(ds.id(), type.id(), where)[0];
      std::string bytes(static_cast<std::size_t>(n), '\0');
      check_intact(n == 0 || H5Dread(ds.id(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0,
                   fmt::format("cannot read dataset '{}' (truncated or corrupted file?)", where));
      verify(ds.id(), where, checksum(bytes.data(), bytes.size()));
      out.emplace(name, std::move(bytes));
    }
    return out;
  }

  // Compares a dataset's stored CRC-32 with the one of the data read.
  void verify(hid_t ds, const std::string& where, std::uint32_t actual) const {
    const auto expected = static_cast<std::uint32_t>(int_attr(ds, "crc32"));
    check_intact(actual == expected,
                 fmt::format("dataset '{}' fails its checksum (stored crc32 {:08x}, data has {:08x}): "
                             "the file is corrupted",
                             where, expected, actual));
  }

  void check(bool ok, const std::string& what) const {
    if (!ok) fail("checkpoint '{}': {}{}", path_, what, h5_error());
  }
  // As check, for what only damaged bytes explain.
  void check_intact(bool ok, const std::string& what) const {
    if (!ok) throw DamagedCheckpoint(fmt::format("checkpoint '{}': {}{}", path_, what, h5_error()));
  }

  // A float dataset's shape, checked before memory is taken for it (see checked_dims).
  Shape stored_shape(hid_t ds, const std::string& where) const {
    H5Handle type{H5Dget_type(ds), H5Tclose};
    check(type.valid() && H5Tget_class(type.id()) == H5T_FLOAT,
          fmt::format("dataset '{}' is not floating point", where));
    const std::vector<hsize_t> dims = checked_dims(ds, type.id(), where);
    return Shape(dims.begin(), dims.end());
  }

  // A dataset's dimensions, checked before memory is taken for it: a damaged file can claim more
  // elements than 64 bits count, or than its bytes hold (where the data is stored contiguously).
  std::vector<hsize_t> checked_dims(hid_t ds, hid_t type, const std::string& where) const {
    H5Handle space{H5Dget_space(ds), H5Sclose};
    const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.id()) : -1;
    check(rank >= 0, fmt::format("cannot read the shape of '{}'", where));
    // A null dataspace has rank 0, as a scalar has, but no element: read as one, its value would
    // be memory never written.
    check_intact(H5Sget_simple_extent_type(space.id()) != H5S_NULL,
                 fmt::format("dataset '{}' holds no value (a null dataspace): the file is corrupted", where));
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    check(H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr) >= 0,
          fmt::format("cannot read the shape of '{}'", where));
    constexpr std::uint64_t kLimit = std::uint64_t{1} << 62;
    std::uint64_t bytes = H5Tget_size(type);  // at most kLimit while `fits`
    bool fits = bytes <= kLimit;
    for (const hsize_t d : dims) {
      if (d > kLimit || (d != 0 && bytes > kLimit / d)) fits = false;  // each dimension too: one may be 0
      if (fits) bytes *= d;
    }
    hsize_t file_bytes = 0;
    const bool sized = H5Fget_filesize(file_, &file_bytes) >= 0;
    // Contiguous and compact data lie in the file, so its size bounds them. Chunked data (a file
    // h5repack compressed, say) may hold more, by the compression's ratio at most, but only when
    // every chunk is stored: one never written reads as fill values, bounded by nothing. Data in
    // other files (external storage, virtual datasets) is no checkpoint's.
    H5Handle plist{H5Dget_create_plist(ds), H5Pclose};
    const H5D_layout_t layout = plist.valid() ? H5Pget_layout(plist.id()) : H5D_LAYOUT_ERROR;
    check_intact((layout == H5D_CONTIGUOUS || layout == H5D_COMPACT || layout == H5D_CHUNKED) &&
                     H5Pget_external_count(plist.id()) == 0,
                 fmt::format("dataset '{}' is not stored in this file as checkpoints store theirs: the file is "
                             "corrupted or not a checkpoint",
                             where));
    if (layout == H5D_CHUNKED && fits && bytes > 0) {
      std::vector<hsize_t> chunk(dims.size());
      hsize_t stored = 0, expected = 1;
      const bool known =
          H5Pget_chunk(plist.id(), rank, chunk.data()) == rank && H5Dget_num_chunks(ds, space.id(), &stored) >= 0;
      for (std::size_t i = 0; known && i < dims.size(); ++i)
        expected *= chunk[i] == 0 ? 0 : (dims[i] + chunk[i] - 1) / chunk[i];  // no overflow: bytes fit
      check_intact(
          known && stored == expected,
          fmt::format("dataset '{}' is stored in chunks, not all of them written: the file is corrupted", where));
    }
    constexpr std::uint64_t kMaxCompressionRatio = 4096;  // deflate's most is about 1032
    if (fits && sized) fits = bytes / (layout == H5D_CHUNKED ? kMaxCompressionRatio : 1) <= file_bytes;
    if (!fits)
      check_intact(false,
                   fmt::format("dataset '{}' claims the shape [{}], more than the file's {} bytes hold: the file is "
                               "corrupted",
                               where, fmt::join(dims, ", "), file_bytes));
    return dims;
  }

  // Training stops before a non-finite update, so its checkpoints hold finite numbers only: one
  // that does not (edited, or written by another tool) would translate into empty lines in silence.
  // `block`: which part of the dataset `t` is, when a part (the element is counted within it).
  void check_finite(const Tensor& t, const std::string& where, const std::string& block = "") const {
    const float* v = t.data<float>();
    const float* bad = std::find_if(v, v + t.numel(), [](float x) { return !std::isfinite(x); });
    if (bad != v + t.numel())
      fail("checkpoint '{}': dataset '{}' holds a non-finite value ({}) at element {}{}", path_, where, *bad, bad - v,
           block);
  }

 private:
  void require_attr(hid_t obj, const char* name) const {
    check(H5Aexists(obj, name) > 0, fmt::format("attribute '{}' is missing", name));
  }
  // H5Aread writes every element of an attribute's dataspace: ours hold one value each, and one
  // of a damaged file that holds more would be written past the memory of one.
  H5Handle open_single_valued_attr(hid_t obj, const char* name) const {
    require_attr(obj, name);
    H5Handle attr{H5Aopen(obj, name, H5P_DEFAULT), H5Aclose};
    check(attr.valid(), fmt::format("cannot read attribute '{}'", name));
    H5Handle space{H5Aget_space(attr.id()), H5Sclose};
    const H5S_class_t kind = space.valid() ? H5Sget_simple_extent_type(space.id()) : H5S_NO_CLASS;
    check_intact(kind == H5S_SCALAR || (kind == H5S_SIMPLE && H5Sget_simple_extent_npoints(space.id()) == 1),
                 fmt::format("attribute '{}' does not hold exactly one value: the file is corrupted", name));
    return attr;
  }
  void scalar_attr(hid_t obj, const char* name, hid_t mem_type, void* out) const {
    const H5Handle attr = open_single_valued_attr(obj, name);
    check(H5Aread(attr.id(), mem_type, out) >= 0, fmt::format("cannot read attribute '{}'", name));
  }
  Tensor dataset(const std::string& group_path, const std::string& name) const {
    const std::string where = group_path + "/" + name;
    H5Handle ds{H5Dopen2(file_, where.c_str(), H5P_DEFAULT), H5Dclose};
    check(ds.valid(), fmt::format("cannot open dataset '{}'", where));
    Tensor t = Tensor::empty(stored_shape(ds.id(), where), DType::f32);
    check_intact(H5Dread(ds.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) >= 0,
                 fmt::format("cannot read dataset '{}' (truncated or corrupted file?)", where));
    verify(ds.id(), where, checksum(t.raw_data(), static_cast<std::size_t>(t.numel()) * sizeof(float)));
    check_finite(t, where);
    return t;
  }

  std::string path_;
  hid_t file_;
};

// Opens a checkpoint read-only; throws naming the file when it is missing or not readable HDF5.
hid_t open_for_reading(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)  // a loop of links, a name too long
    fail("cannot read checkpoint '{}': {}", path, ec.message());
  if (!fs::exists(status)) fail("checkpoint '{}' does not exist", path);
  if (fs::is_directory(status)) fail("checkpoint '{}' is a folder, not a file", path);
  // A FIFO would block the open below until a writer came, with no word; HDF5 needs a file it can seek in.
  if (!fs::is_regular_file(status)) fail("checkpoint '{}' is not a regular file (a pipe or a device?)", path);
  // A file this process may not read (permissions) is no damage: HDF5 would call it not HDF5, and
  // a resume would point at an earlier checkpoint.
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd < 0)
    fail("cannot read checkpoint '{}': {}", path, std::strerror(errno));
  else
    ::close(fd);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw DamagedCheckpoint(fmt::format("checkpoint '{}' is not an HDF5 file (empty, truncated or corrupted?)", path));
  }
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0)
    throw DamagedCheckpoint(
        fmt::format("checkpoint '{}' cannot be opened (truncated or corrupted?){}", path, h5_error()));
  return file;
}

// Root attributes (format version checked) and, when present, the /train group.
void read_header(const Reader& r, hid_t file, std::int64_t& step, std::string& config_yaml,
                 std::optional<TrainingState>& state) {
  const std::int64_t version = r.int_attr(file, "format_version");
  r.check(version == kCheckpointFormatVersion,
          fmt::format("format version {} is not the one this build reads ({})", version, kCheckpointFormatVersion));
  step = r.int_attr(file, "step");
  config_yaml = r.string_attr(file, "config");
  if (r.has_attr(file, "crc32")) {  // files written before it have none
    const auto expected = static_cast<std::uint32_t>(r.int_attr(file, "crc32"));
    const std::uint32_t actual = header_checksum(step, config_yaml);
    r.check_intact(actual == expected, fmt::format("the root attributes 'step' and 'config' fail their checksum "
                                                   "(stored crc32 {:08x}, they have {:08x}): the file is corrupted or "
                                                   "was edited",
                                                   expected, actual));
  }
  if (!r.has(file, "train")) return;
  H5Handle g{H5Gopen2(file, "train", H5P_DEFAULT), H5Gclose};
  r.check(g.valid(), "cannot open group '/train'");
  TrainingState s;
  s.step = r.int_attr(g.id(), "step");
  s.epoch = r.int_attr(g.id(), "epoch");
  s.position = r.int_attr(g.id(), "position");
  s.shuffle_seed = static_cast<std::uint64_t>(r.int_attr(g.id(), "shuffle_seed"));
  s.dropout_seed = static_cast<std::uint64_t>(r.int_attr(g.id(), "dropout_seed"));
  s.optimizer_step = r.int_attr(g.id(), "optimizer_step");
  s.learning_rate = r.real_attr(g.id(), "learning_rate");
  s.elapsed_seconds = r.real_attr(g.id(), "elapsed_seconds");
  s.best_valid = r.real_attr(g.id(), "best_valid");
  s.best_valid_step = r.int_attr(g.id(), "best_valid_step");
  // Added after format 2 was fixed: older files lack it, and count from 0 again.
  if (r.has_attr(g.id(), "validations_since_best"))
    s.validations_since_best = r.int_attr(g.id(), "validations_since_best");
  s.last_validated_step =
      r.has_attr(g.id(), "last_validated_step") ? r.int_attr(g.id(), "last_validated_step") : s.step;
  if (r.has_attr(g.id(), "train_fingerprint"))
    s.train_fingerprint = static_cast<std::uint64_t>(r.int_attr(g.id(), "train_fingerprint"));
  if (r.has_attr(g.id(), "crc32")) {  // files written before it have none
    const auto expected = static_cast<std::uint32_t>(r.int_attr(g.id(), "crc32"));
    const std::uint32_t actual = state_checksum(step, s);
    r.check_intact(actual == expected, fmt::format("the attributes of '/train' and the file's step fail their checksum "
                                                   "(stored crc32 {:08x}, they have {:08x}): the file is corrupted",
                                                   expected, actual));
  }
  state = s;
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
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) {
    std::error_code ignored;  // the rename's error is the one to report
    fs::remove(tmp, ignored);
    fail("cannot write checkpoint '{}': renaming '{}' to it failed: {}", path, tmp, ec.message());
  }
  // The rename itself must reach the disk too.
  sync_folder(final_path.has_parent_path() ? final_path.parent_path().string() : ".");
}

CheckpointHeader read_checkpoint_header(const std::string& path) {
  H5Handle file{open_for_reading(path), H5Fclose};
  const Reader r(path, file.id());
  CheckpointHeader h;
  std::optional<TrainingState> state;
  read_header(r, file.id(), h.step, h.config_yaml, state);
  h.full = state.has_value() && r.has(file.id(), "optimizer");
  return h;
}

std::int64_t checkpoint_step(const std::string& path) { return read_checkpoint_header(path).step; }

std::map<std::string, std::string> load_vocabularies(const std::string& path) {
  H5Handle file{open_for_reading(path), H5Fclose};
  const Reader r(path, file.id());
  Checkpoint c;
  read_header(r, file.id(), c.step, c.config_yaml, c.state);
  return r.byte_strings("/vocab");
}

Checkpoint load_checkpoint(const std::string& path, bool weights_only) {
  H5Handle file{open_for_reading(path), H5Fclose};
  const Reader r(path, file.id());
  Checkpoint c;
  read_header(r, file.id(), c.step, c.config_yaml, c.state);
  c.model = r.tensors("/model");
  if (!weights_only && r.has(file.id(), "optimizer")) {
    c.exp_avg = r.tensors("/optimizer/exp_avg");
    c.exp_avg_sq = r.tensors("/optimizer/exp_avg_sq");
  }
  c.vocabularies = r.byte_strings("/vocab");
  r.check(file.close(), "closing the file failed");
  return c;
}

Checkpoint average_checkpoints(const std::vector<std::string>& paths) {
  TESSERA_CHECK(!paths.empty(), "average: no checkpoints given");
  Checkpoint first = load_checkpoint(paths[0], /*weights_only=*/true);
  std::map<std::string, std::vector<double>> sums;
  for (const auto& [name, t] : first.model) sums[name] = t.to_doubles();
  std::int64_t step = first.step;
  std::string vocab_from = paths[0];  // the first file with vocabularies
  for (std::size_t i = 1; i < paths.size(); ++i) {
    const Checkpoint c = load_checkpoint(paths[i], /*weights_only=*/true);
    for (const auto& [name, t] : c.model) {
      auto it = first.model.find(name);
      if (it == first.model.end())
        fail("average: '{}' has '/model/{}', which '{}' does not have", paths[i], name, paths[0]);
      if (it->second.shape() != t.shape())
        fail("average: '/model/{}' has shape {} in '{}' but {} in '{}'", name, shape_str(t.shape()), paths[i],
             shape_str(it->second.shape()), paths[0]);
      const std::vector<double> v = t.to_doubles();
      std::vector<double>& sum = sums[name];
      for (std::size_t j = 0; j < v.size(); ++j) sum[j] += v[j];
    }
    for (const auto& [name, t] : first.model)
      if (!c.model.contains(name)) fail("average: '{}' has no '/model/{}', which '{}' has", paths[i], name, paths[0]);
    // Files written before checkpoints held vocabularies have none; any two that do must agree.
    if (!c.vocabularies.empty() && !first.vocabularies.empty() && c.vocabularies != first.vocabularies)
      fail("average: '{}' was trained with other vocabularies (/vocab) than '{}'", paths[i], vocab_from);
    if (first.vocabularies.empty() && !c.vocabularies.empty()) {
      first.vocabularies = c.vocabularies;
      vocab_from = paths[i];
    }
    step = std::max(step, c.step);  // the newest input's, whatever the order they are given in
  }
  Checkpoint out;
  out.step = step;
  out.config_yaml = first.config_yaml;
  out.vocabularies = first.vocabularies;
  const double n = static_cast<double>(paths.size());
  for (auto& [name, sum] : sums) {
    Tensor t = Tensor::empty(first.model.at(name).shape(), DType::f32);
    float* d = t.data<float>();
    for (std::size_t j = 0; j < sum.size(); ++j) d[j] = static_cast<float>(sum[j] / n);
    out.model.emplace(name, std::move(t));
  }
  return out;
}

std::uint32_t checksum(const void* data, std::size_t bytes) {
  // ISA-L's reflected CRC-32 is zlib's (same polynomial, init and final xor), with carry-less
  // multiplication: ~10x zlib's speed, so verifying a checkpoint costs little next to reading it.
  return crc32_gzip_refl(0, static_cast<const unsigned char*>(data), bytes);
}

TensorMap named_values(const std::vector<ag::Var>& params) {
  TensorMap out;
  for (const ag::Var& p : params) out.emplace(p.name(), p.value());
  return out;
}

std::vector<Tensor> match_parameters(const TensorMap& tensors, const std::vector<ag::Var>& params,
                                     const std::string& path, const std::string& group) {
  std::vector<Tensor> out;
  for (const ag::Var& p : params) {
    auto it = tensors.find(p.name());
    if (it == tensors.end())
      fail("checkpoint '{}' has no '{}/{}': it does not fit the configured model", path, group, p.name());
    if (it->second.shape() != p.shape())
      fail("checkpoint '{}': '{}/{}' has shape {}, the configured model needs {}", path, group, p.name(),
           shape_str(it->second.shape()), shape_str(p.shape()));
    out.push_back(it->second.to(p.value().dtype()));
  }
  if (tensors.size() != params.size()) {
    for (const auto& entry : tensors) {  // not a structured binding: lambdas capture those only from clang 16
      const std::string& name = entry.first;
      const bool known = std::any_of(params.begin(), params.end(), [&](const ag::Var& p) { return p.name() == name; });
      if (!known) fail("checkpoint '{}' has '{}/{}', which the configured model does not have", path, group, name);
    }
  }
  return out;
}

void assign_weights(const Checkpoint& ckpt, const std::string& path, std::vector<ag::Var>& params) {
  const std::vector<Tensor> values = match_parameters(ckpt.model, params, path, "/model");
  for (std::size_t i = 0; i < params.size(); ++i) params[i].value().copy_from(values[i]);
}

}  // namespace tessera::io

// ---------------------------------------------------------------- tensor-parallel checkpoints
namespace tessera::io {
namespace {

// Where a rank's block sits in the full tensor: one hyperslab (start, count) per dimension.
struct Slab {
  std::vector<hsize_t> full, start, count;
};

Slab block_slab(const Shape& block, dist::ShardDim dim, int part, int parts) {
  Slab s;
  s.count.assign(block.begin(), block.end());
  s.full = s.count;
  s.start.assign(block.size(), 0);
  if (dim == dist::ShardDim::replicated || block.empty()) return s;
  const std::size_t d = block.size() == 1 || dim == dist::ShardDim::rows ? 0 : 1;
  s.full[d] *= static_cast<hsize_t>(parts);
  s.start[d] = s.count[d] * static_cast<hsize_t>(part);
  return s;
}

// CRC-32 of the full tensor from the blocks of all ranks, in the full tensor's row-major byte
// order: row blocks follow each other; column blocks interleave row by row.
std::uint32_t group_crc(const Tensor& block, dist::ShardDim dim, MPI_Comm comm, int parts) {
  const auto* bytes = static_cast<const unsigned char*>(block.raw_data());
  if (dim == dist::ShardDim::replicated || parts == 1) return checksum(bytes, block.nbytes());
  const bool rows = block.dim() == 1 || dim == dist::ShardDim::rows;
  const std::int64_t pieces = rows ? 1 : block.size(0);
  const std::size_t piece_bytes = rows ? block.nbytes() : block.nbytes() / static_cast<std::size_t>(pieces);
  std::vector<std::uint64_t> mine(static_cast<std::size_t>(pieces));
  for (std::int64_t i = 0; i < pieces; ++i)
    mine[static_cast<std::size_t>(i)] = checksum(bytes + static_cast<std::size_t>(i) * piece_bytes, piece_bytes);
  std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(parts));
  if (MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(), static_cast<int>(mine.size()),
                    MPI_UINT64_T, comm) != MPI_SUCCESS)
    fail("checkpoint: exchanging checksums failed");
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (std::int64_t i = 0; i < pieces; ++i)
    for (int r = 0; r < parts; ++r)
      crc = crc32_combine(
          crc, static_cast<uLong>(all[static_cast<std::size_t>(r) * mine.size() + static_cast<std::size_t>(i)]),
          static_cast<z_off_t>(piece_bytes));
  return static_cast<std::uint32_t>(crc);
}

dist::ShardDim shard_of(const std::map<std::string, dist::ShardDim>& shards, const std::string& name) {
  auto it = shards.find(name);
  return it == shards.end() ? dist::ShardDim::replicated : it->second;
}

// The failure tests' faults in a tensor-parallel save or load (see common/fault_injection.h).
bool injected_fault(const char* name) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return fault::injected(name, rank);
}

void hang_if_injected(const char* name) {
  if (!injected_fault(name)) return;
  const dist::UntimedCollectives stuck;  // a stuck process does not time itself out
  fault::hang();
}

void write_sharded_tensors(Writer& w, hid_t parent, const char* name, const std::string& group_path,
                           const TensorMap& tensors, const ShardedCheckpoint& c, MPI_Comm comm, int part, int parts) {
  H5Handle g{w.group(parent, name), H5Gclose};
  H5Handle dxpl{H5Pcreate(H5P_DATASET_XFER), H5Pclose};
  H5Pset_dxpl_mpio(dxpl.id(), H5FD_MPIO_COLLECTIVE);
  for (const auto& [key, value] : tensors) {
    const Tensor block = value.to(Device::cpu).to(DType::f32);
    const dist::ShardDim dim = shard_of(c.shards, key);
    const Slab slab = block_slab(block.shape(), dim, part, parts);
    const std::string where = group_path + "/" + key;
    H5Handle fspace{H5Screate_simple(static_cast<int>(slab.full.size()), slab.full.data(), nullptr), H5Sclose};
    H5Handle ds{H5Dcreate2(g.id(), key.c_str(), H5T_IEEE_F32LE, fspace.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose};
    w.check(ds.valid(), where);
    H5Handle mspace{H5Screate_simple(static_cast<int>(slab.count.size()), slab.count.data(), nullptr), H5Sclose};
    if (dim == dist::ShardDim::replicated && part != 0) {  // group rank 0 writes replicated tensors
      H5Sselect_none(fspace.id());
      H5Sselect_none(mspace.id());
    } else if (!slab.full.empty()) {
      H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, slab.start.data(), nullptr, slab.count.data(), nullptr);
    }
    w.check(H5Dwrite(ds.id(), H5T_NATIVE_FLOAT, mspace.id(), fspace.id(), dxpl.id(), block.raw_data()) >= 0 &&
                !injected_fault("SAVE"),
            where);
    w.int_attr(ds.id(), "crc32", group_crc(block, dim, comm, parts));
    w.check(ds.close(), where);
  }
}

}  // namespace

void save_checkpoint_sharded(const std::string& path, const ShardedCheckpoint& c, dist::MpiCommunicator& group) {
  // MPI-IO's collectives wait for every rank of the group: one that hangs (or a save that takes
  // longer than parallel.timeout_s) ends the job, as in any other collective.
  const dist::CollectiveWatch watch("a tensor-parallel checkpoint save (MPI-IO, this rank's own writes included)");
  const fs::path final_path(path);
  const int part = group.rank(), parts = group.size();
  if (part == 0 && final_path.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(final_path.parent_path(), ec);
    if (ec)
      fail("cannot write checkpoint '{}': cannot create folder '{}': {}", path, final_path.parent_path().string(),
           ec.message());
  }
  group.barrier();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string tmp = path + ".tmp";
  // noexcept: any other exception in here ends the process without unwinding (see abort_sharded_save).
  [&]() noexcept {
    Writer w(tmp, true);
    H5Handle fapl{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
    w.check(H5Pset_fapl_mpio(fapl.id(), group.comm(), MPI_INFO_NULL) >= 0, "/ (MPI-IO)");
    H5Handle file{H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose};
    if (!file.valid())
      abort_sharded_save(tmp,
                         fmt::format("cannot create checkpoint '{}' (is the folder writable?){}", tmp, h5_error()));
    hang_if_injected("SAVE_HANG");
    write_header(w, file.id(), c.step, c.config_yaml);
    write_sharded_tensors(w, file.id(), "model", "/model", c.model, c, group.comm(), part, parts);
    if (!c.exp_avg.empty() || !c.exp_avg_sq.empty()) {
      H5Handle opt{w.group(file.id(), "optimizer"), H5Gclose};
      write_sharded_tensors(w, opt.id(), "exp_avg", "/optimizer/exp_avg", c.exp_avg, c, group.comm(), part, parts);
      write_sharded_tensors(w, opt.id(), "exp_avg_sq", "/optimizer/exp_avg_sq", c.exp_avg_sq, c, group.comm(), part,
                            parts);
    }
    {
      H5Handle dxpl{H5Pcreate(H5P_DATASET_XFER), H5Pclose};
      H5Pset_dxpl_mpio(dxpl.id(), H5FD_MPIO_COLLECTIVE);
      write_vocabularies(w, file.id(), c.vocabularies, /*write_data=*/part == 0, dxpl.id());
    }
    if (c.state) {
      // Parallel HDF5 takes an attribute's value from any rank, so all must write the same: group
      // rank 0's state (each rank's clock gives its own elapsed_seconds; a mix of two ranks' fields
      // would fail the state's checksum).
      TrainingState state = *c.state;
      static_assert(std::is_trivially_copyable_v<TrainingState>);
      w.check(MPI_Bcast(&state, sizeof(state), MPI_BYTE, 0, group.comm()) == MPI_SUCCESS, "/train (MPI_Bcast)");
      write_state(w, file.id(), c.step, state);
    }
    w.check(H5Fflush(file.id(), H5F_SCOPE_GLOBAL) >= 0, "/ (flush)");
    w.check(file.close(), "/ (close)");
  }();
  if (part == 0) {
    const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    const bool synced = fd >= 0 && ::fsync(fd) == 0;
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    if (!synced) {
      fs::remove(tmp, ec);
      fail("cannot write checkpoint '{}': flushing to disk failed", tmp);
    }
    fs::rename(tmp, final_path, ec);
    if (ec) {
      std::error_code ignored;  // the rename's error is the one to report
      fs::remove(tmp, ignored);
      fail("cannot write checkpoint '{}': renaming '{}' to it failed: {}", path, tmp, ec.message());
    }
    sync_folder(final_path.has_parent_path() ? final_path.parent_path().string() : ".");
  }
  group.barrier();
}

ShardedCheckpoint load_checkpoint_sharded(const std::string& path, const std::map<std::string, dist::ShardDim>& shards,
                                          dist::MpiCommunicator& group, bool weights_only) {
  const dist::CollectiveWatch watch("a tensor-parallel checkpoint load (MPI-IO, this rank's own reads included)");
  H5Handle file{open_for_reading(path), H5Fclose};
  const Reader r(path, file.id());
  ShardedCheckpoint c;
  c.shards = shards;
  read_header(r, file.id(), c.step, c.config_yaml, c.state);
  hang_if_injected("LOAD_HANG");
  const int part = group.rank(), parts = group.size();
  // Every rank opens the path for itself: copies that differ (node-local ones, or a relative path
  // in ranks started in other working directories) would meet below as a checksum failure of
  // blocks from two files. Group rank 0 names it; its error ends the job (MPI_Abort) while the
  // others wait.
  std::uint64_t header = hash_combine(hash_combine(0, static_cast<std::uint64_t>(c.step)), c.config_yaml);
  if (c.state) header = hash_combine(hash_combine(header, c.state->epoch), c.state->position);
  if (dist::count_ranks(dist::broadcast_u64(header, &group) != header, &group) > 0) {
    if (part == 0)
      fail(
          "cannot read checkpoint '{}': the {} ranks of a tensor-parallel group read different files under this name "
          "(their step, config or data position differ: node-local copies that differ, or other working directories?): "
          "give every rank the same checkpoint",
          path, parts);
    group.barrier();
  }
  // Each dataset's block; names are read in sorted order on every rank (the checksums are collective).
  auto read_group = [&](const std::string& group_path) {
    TensorMap out;
    for (const std::string& name : r.names(group_path)) {
      const std::string where = group_path + "/" + name;
      H5Handle ds{H5Dopen2(file.id(), where.c_str(), H5P_DEFAULT), H5Dclose};
      r.check(ds.valid(), fmt::format("cannot open dataset '{}'", where));
      const Shape full = r.stored_shape(ds.id(), where);
      H5Handle fspace{H5Dget_space(ds.id()), H5Sclose};
      const dist::ShardDim dim = shard_of(shards, name);
      Shape block_shape = full;
      if (dim != dist::ShardDim::replicated && !block_shape.empty()) {
        const std::size_t d = block_shape.size() == 1 || dim == dist::ShardDim::rows ? 0 : 1;
        r.check(d < block_shape.size() && block_shape[d] % parts == 0,
                fmt::format("dataset '{}' of shape {} does not split into {} tensor-parallel blocks", where,
                            shape_str(full), parts));
        block_shape[d] /= parts;
      }
      Tensor block = Tensor::empty(block_shape, DType::f32);
      const Slab slab = block_slab(block_shape, dim, part, parts);
      if (!slab.full.empty())
        H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, slab.start.data(), nullptr, slab.count.data(), nullptr);
      H5Handle mspace{H5Screate_simple(static_cast<int>(slab.count.size()), slab.count.data(), nullptr), H5Sclose};
      r.check_intact(H5Dread(ds.id(), H5T_NATIVE_FLOAT, mspace.id(), fspace.id(), H5P_DEFAULT, block.raw_data()) >= 0,
                     fmt::format("cannot read dataset '{}' (truncated or corrupted file?)", where));
      r.verify(ds.id(), where, group_crc(block, dim, group.comm(), parts));
      r.check_finite(block, where,
                     parts > 1 && dim != dist::ShardDim::replicated
                         ? fmt::format(" of its tensor-parallel block {} of {}", part + 1, parts)
                         : std::string());
      out.emplace(name, std::move(block));
    }
    return out;
  };
  c.model = read_group("/model");
  if (!weights_only && r.has(file.id(), "optimizer")) {
    c.exp_avg = read_group("/optimizer/exp_avg");
    c.exp_avg_sq = read_group("/optimizer/exp_avg_sq");
  }
  r.check(file.close(), "closing the file failed");
  return c;
}

}  // namespace tessera::io
