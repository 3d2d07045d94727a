#include "io/checkpoint_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace tessera::io::detail {

namespace fs = std::filesystem;

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

void write_header(Writer& w, hid_t file, std::int64_t step, const std::string& config_yaml) {
  w.int_attr(file, "format_version", kCheckpointFormatVersion);
  w.int_attr(file, "step", step);
  w.string_attr(file, "config", config_yaml);
  w.string_attr(file, "created_by", "tessera");
  w.int_attr(file, "crc32", header_checksum(step, config_yaml));
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
  if (s.fitted_max_steps > 0) w.int_attr(g.id(), "fitted_max_steps", s.fitted_max_steps);
}

void write_tensors(Writer& w, hid_t parent, const char* name, const std::string& group_path, const TensorMap& tensors) {
  H5Handle g{w.group(parent, name), H5Gclose};
  for (const auto& [key, value] : tensors) w.tensor(g.id(), group_path, key, value);
}

void write_vocabularies(Writer& w, hid_t file, const std::map<std::string, std::string>& vocabularies, bool write_data,
                        hid_t dxpl) {
  if (vocabularies.empty()) return;
  H5Handle g{w.group(file, "vocab"), H5Gclose};
  for (const auto& [name, bytes] : vocabularies) w.bytes(g.id(), "/vocab", name, bytes, write_data, dxpl);
}

void sync_folder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void rename_into_place(const std::string& tmp, const std::string& path) {
  const fs::path final_path(path);
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

}  // namespace tessera::io::detail
