// Tessera's CUDA emulator: NCCL over MPI (see include/nccl.h).
#include "nccl.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_bf16.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  // The last collective queued on it: each starts after the one before, whatever their streams,
  // so every rank starts them on `mpi` in the order it issued them (as MPI requires).
  std::shared_ptr<tessera::cuda_emulator::Queued> last;
};

namespace {

using tessera::cuda_emulator::DeviceAccess;
using tessera::cuda_emulator::is_device_memory;

std::size_t size_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat32:
    case ncclBfloat16:  // reduced as float32, below
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
    case ncclFloat16:
      break;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg:
      return MPI_SUM;
    case ncclProd:
      return MPI_PROD;
    case ncclMax:
      return MPI_MAX;
    case ncclMin:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// A reduction's buffer in the type MPI reduces (bfloat16 widened to float32), and back.
std::vector<float> widen_bf16(const void* p, std::size_t count) {
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return out;
}
void narrow_bf16(const std::vector<float>& v, void* p) {
  for (std::size_t i = 0; i < v.size(); ++i) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v[i]);
}

template <typename T>
void divide_as(void* p, std::size_t count, int by) {
  for (std::size_t i = 0; i < count; ++i)
    static_cast<T*>(p)[i] = static_cast<T>(static_cast<T*>(p)[i] / static_cast<T>(by));
}
// ncclAvg: the sum, divided by the ranks (integers truncate).
void divide(void* p, std::size_t count, ncclDataType_t t, int by) {
  switch (t) {
    case ncclInt8:
      return divide_as<std::int8_t>(p, count, by);
    case ncclUint8:
      return divide_as<std::uint8_t>(p, count, by);
    case ncclInt32:
      return divide_as<std::int32_t>(p, count, by);
    case ncclUint32:
      return divide_as<std::uint32_t>(p, count, by);
    case ncclInt64:
      return divide_as<std::int64_t>(p, count, by);
    case ncclUint64:
      return divide_as<std::uint64_t>(p, count, by);
    case ncclFloat32:
      return divide_as<float>(p, count, by);
    case ncclFloat64:
      return divide_as<double>(p, count, by);
    case ncclFloat16:
    case ncclBfloat16:
      return;  // not reached: no float16; bfloat16 is divided as float32
  }
}

bool usable(ncclComm_t comm, const void* buffer, std::size_t bytes) {
  return comm != nullptr && comm->mpi != MPI_COMM_NULL && (bytes == 0 || is_device_memory(buffer, bytes));
}

// One rank's part of a collective, queued on a stream. It starts (a non-blocking MPI collective
// on copies) once the work before it on its stream, and the collective before it on its
// communicator, are done. It completes, writing its result, once every rank has reached it: on
// MPI_Test from cudaEventQuery (never at the first check) or MPI_Wait from a synchronization.
// Meanwhile the bytes it writes hold NaN (0xff) and must stay so, and the bytes it reads must not
// change: on a GPU, other work touching them unordered is a race.
class Collective final : public tessera::cuda_emulator::StreamWork {
 public:
  enum class Kind { all_reduce, reduce, broadcast, reduce_scatter, all_gather };
  // root: the reduce's or broadcast's (ignored by the others). count: elements of each rank's
  // block for reduce_scatter (its output) and all_gather (its input), of the whole buffer else.
  Collective(const char* name, Kind kind, const void* send, void* recv, std::size_t count, ncclDataType_t type,
             ncclRedOp_t op, int root, MPI_Comm comm)
      : name_(name),
        kind_(kind),
        send_(send),
        recv_(recv),
        count_(count),
        type_(type),
        op_(op),
        root_(root),
        comm_(comm) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    const std::size_t block = count * size_of(type), all = block * static_cast<std::size_t>(size_);
    send_bytes_ = kind == Kind::reduce_scatter ? all : block;
    recv_bytes_ = kind == Kind::all_gather ? all : block;
    receives_ = kind != Kind::reduce || rank_ == root;
    reads_ = kind != Kind::broadcast || rank_ == root;
    // In place (the buffers overlap): a broadcast's root only reads; the others' reads are (in
    // part) of what they write.
    const auto* s = static_cast<const unsigned char*>(send);
    const auto* r = static_cast<const unsigned char*>(recv);
    in_place_ = s < r + std::max<std::size_t>(recv_bytes_, 1) && r < s + std::max<std::size_t>(send_bytes_, 1);
    writes_ = receives_ && !(kind == Kind::broadcast && rank_ == root && send == recv);
  }

  void start() override {
    DeviceAccess access;
    if (reads_ && send_bytes_ > 0)
      sent_.assign(static_cast<const unsigned char*>(send_), static_cast<const unsigned char*>(send_) + send_bytes_);
    const int rc = kind_ == Kind::broadcast || kind_ == Kind::all_gather ? start_copy() : start_reduction();
    if (writes_ && recv_bytes_ > 0) std::memset(recv_, 0xff, recv_bytes_);  // NaN until it completes
    started_ = rc == MPI_SUCCESS;
  }

  bool finish(bool wait) override {
    // The first query finds it running, as it would on a GPU, so the caller's not-ready path runs.
    if (!wait && !queried_) {
      queried_ = true;
      return false;
    }
    if (started_) {
      int done = 0;
      if (wait) {
        MPI_Wait(&request_, MPI_STATUS_IGNORE);
        done = 1;
      } else {
        MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
      }
      if (!done) return false;
    }
    DeviceAccess access;
    const std::string failure = check_untouched();
    if (!failure.empty()) {
      tessera::cuda_emulator::report_failure(cudaErrorLaunchFailure, (std::string(name_) + ": " + failure).c_str());
      return true;
    }
    if (writes_) write_result();
    return true;
  }

 private:
  // Broadcast and all-gather move bytes.
  int start_copy() {
    if (kind_ == Kind::broadcast) {
      result_ = rank_ == root_ ? sent_ : std::vector<unsigned char>(recv_bytes_);
      return MPI_Ibcast(result_.data(), static_cast<int>(recv_bytes_), MPI_BYTE, root_, comm_, &request_);
    }
    result_.resize(recv_bytes_);
    return MPI_Iallgather(sent_.data(), static_cast<int>(send_bytes_), MPI_BYTE, result_.data(),
                          static_cast<int>(send_bytes_), MPI_BYTE, comm_, &request_);
  }

  // The reductions, bfloat16 widened to float32.
  int start_reduction() {
    const std::size_t in_count = send_bytes_ / size_of(type_), out_count = receives_ ? recv_bytes_ / size_of(type_) : 0;
    const void* in = sent_.data();
    void* out = nullptr;
    if (type_ == ncclBfloat16) {
      widened_in_ = widen_bf16(sent_.data(), in_count);
      widened_out_.resize(out_count);
      in = widened_in_.data();
      out = widened_out_.data();
    } else {
      result_.resize(receives_ ? recv_bytes_ : 0);
      out = result_.data();
    }
    const int n = static_cast<int>(in_count);
    switch (kind_) {
      case Kind::all_reduce:
        return MPI_Iallreduce(in, out, n, mpi_type(type_), mpi_op(op_), comm_, &request_);
      case Kind::reduce:
        return MPI_Ireduce(in, out, n, mpi_type(type_), mpi_op(op_), root_, comm_, &request_);
      default:
        return MPI_Ireduce_scatter_block(in, out, static_cast<int>(count_), mpi_type(type_), mpi_op(op_), comm_,
                                         &request_);
    }
  }

  // What its buffers must still hold when it completes; empty when they do.
  std::string check_untouched() const {
    if (!started_) return "MPI failed to start it";
    if (writes_ &&
        !std::all_of(static_cast<const unsigned char*>(recv_), static_cast<const unsigned char*>(recv_) + recv_bytes_,
                     [](unsigned char b) { return b == 0xff; }))
      return "device memory it writes was written while it was in flight (by work not ordered after it on its "
             "stream: a race on a GPU)";
    if (reads_ && !(writes_ && in_place_) && send_bytes_ > 0 && std::memcmp(send_, sent_.data(), send_bytes_) != 0)
      return "device memory it reads was changed while it was in flight (by work not ordered after it on its "
             "stream: a race on a GPU)";
    return {};
  }

  void write_result() {
    const std::size_t out_count = recv_bytes_ / size_of(type_);
    const bool reduction = kind_ != Kind::broadcast && kind_ != Kind::all_gather;
    if (type_ == ncclBfloat16 && reduction) {  // reduced as float32
      if (op_ == ncclAvg)
        for (float& x : widened_out_) x /= static_cast<float>(size_);
      narrow_bf16(widened_out_, recv_);
      return;
    }
    if (recv_bytes_ > 0) std::memcpy(recv_, result_.data(), recv_bytes_);
    if (reduction && op_ == ncclAvg) divide(recv_, out_count, type_, size_);
  }

  const char* name_;
  Kind kind_;
  const void* send_;
  void* recv_;
  std::size_t count_;
  ncclDataType_t type_;
  ncclRedOp_t op_;
  int root_;
  MPI_Comm comm_;
  std::size_t send_bytes_ = 0, recv_bytes_ = 0;
  int rank_ = 0, size_ = 1;
  bool receives_ = false, reads_ = false, writes_ = false, in_place_ = false, started_ = false, queried_ = false;
  std::vector<unsigned char> sent_;    // what it reads, as at its start
  std::vector<unsigned char> result_;  // what it will write (not bfloat16 reductions)
  std::vector<float> widened_in_, widened_out_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// sum, prod, max, min and avg over float, double, integers; bfloat16 through float32.
ncclResult_t reduce(const char* name, const void* send, void* recv, std::size_t count, ncclDataType_t type,
                    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || comm->mpi == MPI_COMM_NULL) return ncclInvalidArgument;
  int rank = 0;
  MPI_Comm_rank(comm->mpi, &rank);
  const bool to_all = root < 0, receives = to_all || rank == root;
  const std::size_t bytes = count * size_of(type);
  if (mpi_type(type) == MPI_DATATYPE_NULL || mpi_op(op) == MPI_OP_NULL) return ncclInvalidArgument;
  if (!usable(comm, send, bytes) || (receives && !usable(comm, recv, bytes))) return ncclInvalidArgument;
  if (count > static_cast<std::size_t>(INT32_MAX)) return ncclInvalidArgument;
  comm->last = tessera::cuda_emulator::enqueue(
      stream,
      std::make_unique<Collective>(name, to_all ? Collective::Kind::all_reduce : Collective::Kind::reduce, send, recv,
                                   count, type, op, root, comm->mpi),
      comm->last);
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::random_device device;
  std::seed_seq seed{device(), device(), static_cast<unsigned>(getpid()),
                     static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
  std::mt19937_64 gen(seed);
  for (std::size_t i = 0; i < sizeof id->internal; i += 8) {
    const std::uint64_t v = gen();
    std::memcpy(id->internal + i, &v, 8);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  // Every process of MPI_COMM_WORLD calls this at once; those that share an id form a group.
  std::uint64_t hash = 1469598103934665603ull;
  for (char c : id.internal) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  MPI_Comm group = MPI_COMM_NULL;
  if (MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(hash & 0x7fffffff), rank, &group) != MPI_SUCCESS)
    return ncclSystemError;
  int size = 0, my_rank = 0;
  MPI_Comm_size(group, &size);
  MPI_Comm_rank(group, &my_rank);
  if (size != nranks || my_rank != rank) {
    MPI_Comm_free(&group);
    return ncclInvalidUsage;
  }
  *comm = new ncclComm{group, nullptr};
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (comm == nullptr) return ncclInvalidArgument;
  // Its queued collectives first: every rank must have started them before this MPI collective
  // on the same communicator (NCCL's would run on without the host).
  tessera::cuda_emulator::wait_for(comm->last);
  MPI_Comm sub = MPI_COMM_NULL;
  if (MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &sub) != MPI_SUCCESS)
    return ncclSystemError;
  *newcomm = sub == MPI_COMM_NULL ? nullptr : new ncclComm{sub, nullptr};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    tessera::cuda_emulator::wait_for(comm->last);  // as NCCL, which finishes them first
    MPI_Comm_free(&comm->mpi);
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;  // its MPI communicator is left: a peer may be stuck in it
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (emulated NCCL: MPI failed)";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument (emulated NCCL: a buffer that is not device memory, or a type or operation it lacks)";
    case ncclInvalidUsage:
      return "invalid usage";
  }
  return "unknown result code";
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return reduce("ncclAllReduce", sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (root < 0) return ncclInvalidArgument;
  return reduce("ncclReduce", sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const std::size_t bytes = count * size_of(datatype);
  int rank = 0;
  if (comm == nullptr || comm->mpi == MPI_COMM_NULL) return ncclInvalidArgument;
  MPI_Comm_rank(comm->mpi, &rank);
  if (size_of(datatype) == 0 || !usable(comm, recvbuff, bytes) || (rank == root && !usable(comm, sendbuff, bytes)))
    return ncclInvalidArgument;
  if (bytes > static_cast<std::size_t>(INT32_MAX)) return ncclInvalidArgument;
  comm->last = tessera::cuda_emulator::enqueue(
      stream,
      std::make_unique<Collective>("ncclBroadcast", Collective::Kind::broadcast, sendbuff, recvbuff, count, datatype,
                                   ncclSum, root, comm->mpi),
      comm->last);
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || comm->mpi == MPI_COMM_NULL) return ncclInvalidArgument;
  int size = 0;
  MPI_Comm_size(comm->mpi, &size);
  const std::size_t bytes = recvcount * size_of(datatype);
  if (mpi_type(datatype) == MPI_DATATYPE_NULL || mpi_op(op) == MPI_OP_NULL) return ncclInvalidArgument;
  if (!usable(comm, sendbuff, bytes * static_cast<std::size_t>(size)) || !usable(comm, recvbuff, bytes))
    return ncclInvalidArgument;
  if (recvcount * static_cast<std::size_t>(size) > static_cast<std::size_t>(INT32_MAX)) return ncclInvalidArgument;
  comm->last = tessera::cuda_emulator::enqueue(
      stream,
      std::make_unique<Collective>("ncclReduceScatter", Collective::Kind::reduce_scatter, sendbuff, recvbuff, recvcount,
                                   datatype, op, 0, comm->mpi),
      comm->last);
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || comm->mpi == MPI_COMM_NULL) return ncclInvalidArgument;
  int size = 0;
  MPI_Comm_size(comm->mpi, &size);
  const std::size_t bytes = sendcount * size_of(datatype);
  if (size_of(datatype) == 0 || !usable(comm, sendbuff, bytes) ||
      !usable(comm, recvbuff, bytes * static_cast<std::size_t>(size)))
    return ncclInvalidArgument;
  if (bytes * static_cast<std::size_t>(size) > static_cast<std::size_t>(INT32_MAX)) return ncclInvalidArgument;
  comm->last = tessera::cuda_emulator::enqueue(
      stream,
      std::make_unique<Collective>("ncclAllGather", Collective::Kind::all_gather, sendbuff, recvbuff, sendcount,
                                   datatype, ncclSum, 0, comm->mpi),
      comm->last);
  return ncclSuccess;
}
