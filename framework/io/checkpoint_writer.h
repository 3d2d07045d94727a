// Writing the parts of a checkpoint file (see checkpoint.h for the layout): the Writer that checks
// every HDF5 call, and the groups every checkpoint holds.
#pragma once

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "io/checkpoint_hdf5.h"

namespace tessera::io::detail {

// A rank that fails in the middle of a parallel-HDF5 save must not unwind: closing the datasets and
// the file are collective calls, and the other ranks wait in another one (a full disk on one rank
// hung the job). It removes the temporary file, says why, and ends the job, as any error on one rank
// does; the earlier checkpoints stay as they were.
[[noreturn]] void abort_sharded_save(const std::string& tmp, const std::string& message);

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

void write_header(Writer& w, hid_t file, std::int64_t step, const std::string& config_yaml);
void write_state(Writer& w, hid_t file, std::int64_t file_step, const TrainingState& s);
void write_tensors(Writer& w, hid_t parent, const char* name, const std::string& group_path, const TensorMap& tensors);
// /vocab/<name>, when the run has vocabularies (see Checkpoint::vocabularies).
void write_vocabularies(Writer& w, hid_t file, const std::map<std::string, std::string>& vocabularies,
                        bool write_data = true, hid_t dxpl = H5P_DEFAULT);

// Flushes a folder's entries (a rename) to disk; best effort.
void sync_folder(const std::string& path);
// Renames the finished temporary `tmp` to checkpoint `path` and syncs its folder; on failure removes
// `tmp` and throws naming both.
void rename_into_place(const std::string& tmp, const std::string& path);

}  // namespace tessera::io::detail
