// Tensor-parallel checkpoints: the same file as save_checkpoint's, written and read in slices.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <type_traits>

#include "common/fault_injection.h"
#include "common/hash.h"
#include "io/checkpoint.h"
#include "io/checkpoint_reader.h"
#include "io/checkpoint_writer.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
using detail::abort_sharded_save;
using detail::h5_error;
using detail::H5Handle;
using detail::open_for_reading;
using detail::read_header;
using detail::Reader;
using detail::rename_into_place;
using detail::write_header;
using detail::write_state;
using detail::write_vocabularies;
using detail::Writer;

// Where a rank's block sits in the full tensor: one hyperslab (start, count) per dimension.
struct Slab {
  std::vector<hsize_t> full, start, count;
};

// The dimension a sharded tensor splits along (1-D tensors: their only one).
std::size_t split_dim(const Shape& shape, dist::ShardDim dim) {
  return shape.size() == 1 || dim == dist::ShardDim::rows ? 0 : 1;
}

// Rank `part`'s block of the tensor of shape `full` (dist::block_range's: uneven where the extent
// does not divide, as a vocabulary's rows).
Slab block_slab(const Shape& full, dist::ShardDim dim, int part, int parts) {
  Slab s;
  s.full.assign(full.begin(), full.end());
  s.count = s.full;
  s.start.assign(full.size(), 0);
  if (dim == dist::ShardDim::replicated || full.empty()) return s;
  const std::size_t d = split_dim(full, dim);
  const dist::BlockRange b = dist::block_range(full[d], part, parts);
  s.start[d] = static_cast<hsize_t>(b.start);
  s.count[d] = static_cast<hsize_t>(b.count);
  return s;
}

// The full tensor's shape from this rank's block: the blocks' extents summed over the group.
Shape full_shape(const Tensor& block, dist::ShardDim dim, MPI_Comm comm, int parts) {
  Shape full = block.shape();
  if (dim == dist::ShardDim::replicated || parts == 1 || full.empty()) return full;
  const std::size_t d = split_dim(full, dim);
  std::int64_t extent = full[d];
  if (MPI_Allreduce(MPI_IN_PLACE, &extent, 1, MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS)
    fail("checkpoint: exchanging block shapes failed");
  full[d] = extent;
  return full;
}

// CRC-32 of the full tensor from the blocks of all ranks, in the full tensor's row-major byte
// order: row blocks follow each other; column blocks interleave row by row.
std::uint32_t group_crc(const Tensor& block, dist::ShardDim dim, MPI_Comm comm, int parts) {
  const auto* bytes = static_cast<const unsigned char*>(block.raw_data());
  if (dim == dist::ShardDim::replicated || parts == 1) return checksum(bytes, block.nbytes());
  const bool rows = block.dim() == 1 || dim == dist::ShardDim::rows;
  const std::int64_t pieces = rows ? 1 : block.size(0);
  const std::size_t piece_bytes = rows ? block.nbytes() : block.nbytes() / static_cast<std::size_t>(pieces);
  // Each rank's piece length first: uneven blocks (a vocabulary's rows) have pieces of other lengths.
  std::vector<std::uint64_t> mine(static_cast<std::size_t>(pieces) + 1);
  mine[0] = piece_bytes;
  for (std::int64_t i = 0; i < pieces; ++i)
    mine[static_cast<std::size_t>(i) + 1] = checksum(bytes + static_cast<std::size_t>(i) * piece_bytes, piece_bytes);
  std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(parts));
  if (MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(), static_cast<int>(mine.size()),
                    MPI_UINT64_T, comm) != MPI_SUCCESS)
    fail("checkpoint: exchanging checksums failed");
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (std::int64_t i = 0; i < pieces; ++i)
    for (int r = 0; r < parts; ++r) {
      const std::uint64_t* of_rank = all.data() + static_cast<std::size_t>(r) * mine.size();
      crc = crc32_combine(crc, static_cast<uLong>(of_rank[static_cast<std::size_t>(i) + 1]),
                          static_cast<z_off_t>(of_rank[0]));
    }
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
    const Slab slab = block_slab(full_shape(block, dim, comm, parts), dim, part, parts);
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
    rename_into_place(tmp, path);
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
      if (dim != dist::ShardDim::replicated && !full.empty())
        r.check(full[split_dim(full, dim)] >= parts,
                fmt::format("dataset '{}' of shape {} does not split into {} tensor-parallel blocks", where,
                            shape_str(full), parts));
      const Slab slab = block_slab(full, dim, part, parts);
      Tensor block = Tensor::empty(Shape(slab.count.begin(), slab.count.end()), DType::f32);
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
