#include "io/checkpoint_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tessera::io::detail {

namespace fs = std::filesystem;

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
  if (r.has_attr(g.id(), "fitted_max_steps")) s.fitted_max_steps = r.int_attr(g.id(), "fitted_max_steps");
  if (r.has_attr(g.id(), "crc32")) {  // files written before it have none
    const auto expected = static_cast<std::uint32_t>(r.int_attr(g.id(), "crc32"));
    const std::uint32_t actual = state_checksum(step, s);
    r.check_intact(actual == expected, fmt::format("the attributes of '/train' and the file's step fail their checksum "
                                                   "(stored crc32 {:08x}, they have {:08x}): the file is corrupted",
                                                   expected, actual));
  }
  state = s;
}

}  // namespace tessera::io::detail
