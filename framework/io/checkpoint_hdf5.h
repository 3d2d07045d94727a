// Internals shared by the checkpoint code (checkpoint*.cpp): HDF5 handles and errors, and the
// checksums of the header and the training state. Not for use outside framework/io.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>

#include "io/checkpoint.h"

namespace tessera::io::detail {

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
std::string h5_error();

// The CRC-32 of the file's step (8 bytes, host byte order) followed by the config's bytes, stored
// as the root's "crc32": the config decides the model's shape and the data it reads, so an edited
// `heads: 4` must be refused, not translated with silently.
std::uint32_t header_checksum(std::int64_t step, const std::string& config_yaml);

// The CRC-32 of the file's step and the training state's fields (8 bytes each, in declaration
// order, in the host's byte order: little-endian on x86 and ARM), stored as /train's "crc32": a
// changed attribute (Adam's t, the data position) is caught as a changed dataset is, instead of
// resuming a subtly different run.
std::uint32_t state_checksum(std::int64_t file_step, const TrainingState& s);

}  // namespace tessera::io::detail
