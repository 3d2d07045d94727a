// Reading the parts of a checkpoint file: the Reader that checks every HDF5 call and every
// dataset's checksum, and refuses damaged files before taking memory for them.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint_hdf5.h"

namespace tessera::io::detail {

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
hid_t open_for_reading(const std::string& path);

// Root attributes (format version checked) and, when present, the /train group.
void read_header(const Reader& r, hid_t file, std::int64_t& step, std::string& config_yaml,
                 std::optional<TrainingState>& state);

}  // namespace tessera::io::detail
