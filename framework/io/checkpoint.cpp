#include "io/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace tessera::io {
namespace {

// Closes an HDF5 handle at scope exit.
struct H5Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5Handle() {
    if (id >= 0) close(id);
  }
};

void write_string_attr(hid_t obj, const char* name, const std::string& value) {
  H5Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(type.id, std::max<std::size_t>(value.size(), 1));
  H5Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  H5Handle attr{H5Acreate2(obj, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  H5Awrite(attr.id, type.id, value.empty() ? "" : value.c_str());
}

void write_int_attr(hid_t obj, const char* name, std::int64_t value) {
  H5Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  H5Handle attr{H5Acreate2(obj, name, H5T_NATIVE_INT64, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  H5Awrite(attr.id, H5T_NATIVE_INT64, &value);
}

std::string read_string_attr(hid_t obj, const char* name, const std::string& path) {
  TESSERA_CHECK(H5Aexists(obj, name) > 0, "checkpoint '{}': attribute '{}' is missing", path, name);
  H5Handle attr{H5Aopen(obj, name, H5P_DEFAULT), H5Aclose};
  H5Handle type{H5Aget_type(attr.id), H5Tclose};
  const std::size_t size = H5Tget_size(type.id);
  std::string s(size, '\0');
  H5Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(mem.id, size);
  TESSERA_CHECK(H5Aread(attr.id, mem.id, s.data()) >= 0, "checkpoint '{}': cannot read attribute '{}'", path, name);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::int64_t read_int_attr(hid_t obj, const char* name, const std::string& path) {
  TESSERA_CHECK(H5Aexists(obj, name) > 0, "checkpoint '{}': attribute '{}' is missing", path, name);
  H5Handle attr{H5Aopen(obj, name, H5P_DEFAULT), H5Aclose};
  std::int64_t v = 0;
  TESSERA_CHECK(H5Aread(attr.id, H5T_NATIVE_INT64, &v) >= 0, "checkpoint '{}': cannot read attribute '{}'", path, name);
  return v;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

void save_weights(const std::string& path, const std::vector<ag::Var>& params, const std::string& config_yaml,
                  std::int64_t step) {
  namespace fs = std::filesystem;
  const fs::path final_path(path);
  if (final_path.has_parent_path()) fs::create_directories(final_path.parent_path());
  const std::string tmp = path + ".tmp";
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, with the file named
  {
    H5Handle file{H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    TESSERA_CHECK(file.id >= 0, "cannot create checkpoint '{}' (is the folder writable?)", tmp);
    write_int_attr(file.id, "format_version", kCheckpointFormatVersion);
    write_int_attr(file.id, "step", step);
    write_string_attr(file.id, "config", config_yaml);
    write_string_attr(file.id, "created_by", "tessera");
    H5Handle group{H5Gcreate2(file.id, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
    for (const ag::Var& p : params) {
      const Tensor v = p.value().to(DType::f32);
      std::vector<hsize_t> dims(v.shape().begin(), v.shape().end());
      H5Handle space{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
      H5Handle ds{
          H5Dcreate2(group.id, p.name().c_str(), H5T_IEEE_F32LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
          H5Dclose};
      TESSERA_CHECK(ds.id >= 0, "checkpoint '{}': cannot create dataset '{}'", tmp, p.name());
      TESSERA_CHECK(H5Dwrite(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.raw_data()) >= 0,
                    "checkpoint '{}': writing '{}' failed (disk full?)", tmp, p.name());
    }
    TESSERA_CHECK(H5Fflush(file.id, H5F_SCOPE_GLOBAL) >= 0, "checkpoint '{}': flush failed (disk full?)", tmp);
  }
  fsync_path(tmp);
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  TESSERA_CHECK(!ec, "checkpoint: cannot rename '{}' to '{}': {}", tmp, path, ec.message());
  if (final_path.has_parent_path()) fsync_path(final_path.parent_path().string());
}

WeightsFile load_weights(const std::string& path) {
  TESSERA_CHECK(std::filesystem::exists(path), "checkpoint '{}' does not exist", path);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  TESSERA_CHECK(H5Fis_hdf5(path.c_str()) > 0, "checkpoint '{}' is not an HDF5 file (truncated or corrupted?)", path);
  H5Handle file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  TESSERA_CHECK(file.id >= 0, "checkpoint '{}' cannot be opened (truncated or corrupted?)", path);
  WeightsFile w;
  w.format_version = read_int_attr(file.id, "format_version", path);
  TESSERA_CHECK(w.format_version == kCheckpointFormatVersion, "checkpoint '{}' has format version {}, expected {}",
                path, w.format_version, kCheckpointFormatVersion);
  w.step = read_int_attr(file.id, "step", path);
  w.config_yaml = read_string_attr(file.id, "config", path);
  TESSERA_CHECK(H5Lexists(file.id, "model", H5P_DEFAULT) > 0, "checkpoint '{}' has no /model group", path);
  H5Handle group{H5Gopen2(file.id, "model", H5P_DEFAULT), H5Gclose};
  H5G_info_t info;
  H5Gget_info(group.id, &info);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[1024];
    H5Lget_name_by_idx(group.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof(name), H5P_DEFAULT);
    H5Handle ds{H5Dopen2(group.id, name, H5P_DEFAULT), H5Dclose};
    TESSERA_CHECK(ds.id >= 0, "checkpoint '{}': cannot open dataset '/model/{}'", path, name);
    H5Handle space{H5Dget_space(ds.id), H5Sclose};
    const int rank = H5Sget_simple_extent_ndims(space.id);
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
    H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
    Tensor t = Tensor::empty(Shape(dims.begin(), dims.end()), DType::f32);
    TESSERA_CHECK(H5Dread(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) >= 0,
                  "checkpoint '{}': cannot read '/model/{}' (truncated or corrupted?)", path, name);
    w.tensors.emplace(name, std::move(t));
  }
  return w;
}

void assign_weights(const WeightsFile& file, const std::string& path, std::vector<ag::Var>& params) {
  for (ag::Var& p : params) {
    auto it = file.tensors.find(p.name());
    TESSERA_CHECK(it != file.tensors.end(), "checkpoint '{}' has no weights for parameter '{}' of the configured model",
                  path, p.name());
    TESSERA_CHECK(it->second.shape() == p.shape(), "checkpoint '{}': '{}' has shape {}, the configured model needs {}",
                  path, p.name(), shape_str(it->second.shape()), shape_str(p.shape()));
    p.value().copy_from(it->second.to(p.value().dtype()));
  }
  TESSERA_CHECK(file.tensors.size() == params.size(),
                "checkpoint '{}' holds {} tensors but the configured model has {} parameters", path,
                file.tensors.size(), params.size());
}

}  // namespace tessera::io
