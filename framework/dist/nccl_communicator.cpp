#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>

#include <exception>

namespace tessera::dist {
namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) fail("{}: NCCL error: {}", what, ncclGetErrorString(rc));
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) fail("{}: CUDA error: {}", what, cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
  }
  fail("{}: unsupported dtype {}", op, dtype_name(t));
}

void check_gpu(const Tensor& t, const char* op) {
  TESSERA_CHECK(t.defined() && t.device() == Device::cuda, "{}: the NCCL backend takes CUDA tensors, got {}", op,
                t.defined() ? t.describe() : std::string("an undefined tensor"));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::average ? ncclAvg : ncclSum; }

class NcclRequest final : public Request {
 public:
  NcclRequest(cudaStream_t stream, Tensor t) : tensor_(std::move(t)) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "all_reduce_async");
    check_cuda(cudaEventRecord(event_, stream), "all_reduce_async");
  }
  ~NcclRequest() override {
    CollectiveWatch mark("NCCL all_reduce_async (wait on release)");
    cudaEventSynchronize(event_);
    cudaEventDestroy(event_);
  }
  void wait() override {
    CollectiveWatch mark("NCCL all_reduce_async (wait)");  // a dead or hung peer: parallel.timeout_s
    check_cuda(cudaEventSynchronize(event_), "all_reduce_async");
  }
  bool test() override {
    const cudaError_t done = cudaEventQuery(event_);
    if (done == cudaErrorNotReady) {
      // The runtime also keeps "not ready" as the thread's last error: left there, the next kernel
      // launch's cudaGetLastError() check would report it as that launch's failure.
      (void)cudaGetLastError();
      return false;
    }
    check_cuda(done, "all_reduce_async");
    return true;
  }

 private:
  cudaEvent_t event_{};
  Tensor tensor_;  // keeps the buffer alive while NCCL uses it
};

}  // namespace

NcclCommunicator::NcclCommunicator(MpiCommunicator& bootstrap)
    : bootstrap_(&bootstrap), rank_(bootstrap.rank()), size_(bootstrap.size()) {
  ncclUniqueId id{};
  if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  CollectiveWatch mark("NCCL bootstrap (ncclCommInitRank)");  // every rank takes part: a hung one would hang it
  if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap.comm()) != MPI_SUCCESS)
    fail("NCCL bootstrap: MPI_Bcast failed");
  check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  create_stream();
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, std::unique_ptr<MpiCommunicator> sizes)
    : comm_(comm), mpi_(std::move(sizes)), bootstrap_(mpi_.get()), rank_(mpi_->rank()), size_(mpi_->size()) {
  create_stream();
}

void NcclCommunicator::create_stream() {
  cudaStream_t s;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  cudaEvent_t e;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  compute_done_ = e;
}

NcclCommunicator::~NcclCommunicator() {
  if (compute_done_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(compute_done_));
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (comm_ == nullptr) return;
  // Unwinding from an error, a peer may be stuck in a collective: ncclCommDestroy would wait for
  // its operations forever (before main could abort the job); ncclCommAbort cancels them.
  if (std::uncaught_exceptions() > 0) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
}

void NcclCommunicator::after_compute() {
  // The tensors were written by kernels on the default stream; the communicator's own stream
  // does not wait for it by itself (it is non-blocking), so it waits for an event recorded there.
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(compute_done_), nullptr), "NCCL collective");
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(compute_done_), 0),
             "NCCL collective");
}

void NcclCommunicator::synchronize(const char* what) {
  CollectiveWatch mark(what);  // a dead or hung peer: parallel.timeout_s
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), what);
}

void NcclCommunicator::enqueue_all_reduce(Tensor& t, ReduceOp op) {
  check_gpu(t, "all_reduce");
  after_compute();
  check_nccl(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()),
                           nccl_type(t.dtype(), "all_reduce"), nccl_op(op), comm_, static_cast<cudaStream_t>(stream_)),
             "all_reduce");
}

void NcclCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  enqueue_all_reduce(t, op);  // no request (an event) for a wait that follows at once
  synchronize("NCCL all_reduce");
}

std::unique_ptr<Request> NcclCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  enqueue_all_reduce(t, op);
  return std::make_unique<NcclRequest>(static_cast<cudaStream_t>(stream_), t);
}

std::unique_ptr<Request> NcclCommunicator::reduce_scatter_async(Tensor& t, ReduceOp op) {
  check_gpu(t, "reduce_scatter_async");
  check_equal_blocks("reduce_scatter_async", t, size_);  // NCCL cannot check: it would read past `t`
  const std::int64_t block = t.numel() / size_;
  after_compute();
  // In place, as NCCL allows: the receive buffer is this rank's block of the send buffer.
  void* mine = static_cast<char*>(t.raw_data()) + static_cast<std::size_t>(block * rank_) * dtype_size(t.dtype());
  check_nccl(ncclReduceScatter(t.raw_data(), mine, static_cast<std::size_t>(block),
                               nccl_type(t.dtype(), "reduce_scatter_async"), nccl_op(op), comm_,
                               static_cast<cudaStream_t>(stream_)),
             "reduce_scatter_async");
  return std::make_unique<NcclRequest>(static_cast<cudaStream_t>(stream_), t);
}

std::unique_ptr<Request> NcclCommunicator::all_gather_async(Tensor& t) {
  check_gpu(t, "all_gather_async");
  check_equal_blocks("all_gather_async", t, size_);
  const std::int64_t block = t.numel() / size_;
  after_compute();
  // In place, as NCCL allows: the send buffer is this rank's block of the receive buffer.
  const void* mine =
      static_cast<const char*>(t.raw_data()) + static_cast<std::size_t>(block * rank_) * dtype_size(t.dtype());
  check_nccl(ncclAllGather(mine, t.raw_data(), static_cast<std::size_t>(block),
                           nccl_type(t.dtype(), "all_gather_async"), comm_, static_cast<cudaStream_t>(stream_)),
             "all_gather_async");
  return std::make_unique<NcclRequest>(static_cast<cudaStream_t>(stream_), t);
}

Tensor NcclCommunicator::all_gather(const Tensor& t) {
  check_gpu(t, "all_gather");
  TESSERA_CHECK(t.dim() >= 1, "all_gather: needs a tensor with a first dimension, got a scalar");
  // Row counts over MPI (they may differ), then one broadcast per rank inside a group.
  std::vector<std::int64_t> rows(static_cast<std::size_t>(size_));
  std::int64_t mine = t.size(0);
  {
    CollectiveWatch mark("NCCL all_gather (row counts, over MPI)");  // a dead or hung peer: parallel.timeout_s
    if (MPI_Allgather(&mine, 1, MPI_INT64_T, rows.data(), 1, MPI_INT64_T, bootstrap_->comm()) != MPI_SUCCESS)
      fail("all_gather: exchanging row counts failed");
  }
  const std::int64_t row_elems = row_elements(t);
  std::int64_t total = 0;
  for (auto r : rows) total += r;
  Shape shape = t.shape();
  shape[0] = total;
  Tensor out = Tensor::empty(shape, t.dtype(), Device::cuda);
  const std::size_t elem = dtype_size(t.dtype());
  auto stream = static_cast<cudaStream_t>(stream_);
  after_compute();
  check_nccl(ncclGroupStart(), "all_gather");
  std::int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    const auto n = static_cast<std::size_t>(rows[static_cast<std::size_t>(r)] * row_elems);
    void* dst = static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(offset * row_elems) * elem;
    check_nccl(ncclBroadcast(t.raw_data(), dst, n, nccl_type(t.dtype(), "all_gather"), r, comm_, stream), "all_gather");
    offset += rows[static_cast<std::size_t>(r)];
  }
  check_nccl(ncclGroupEnd(), "all_gather");
  synchronize("NCCL all_gather");
  return out;
}

Tensor NcclCommunicator::reduce_scatter(const Tensor& t, const std::vector<std::int64_t>& rows, ReduceOp op) {
  check_gpu(t, "reduce_scatter");
  TESSERA_CHECK(t.dim() >= 1, "reduce_scatter: needs a tensor with a first dimension, got a scalar");
  check_row_shares(rows, size_, t.size(0));  // NCCL cannot check: bad counts would read past `t`
  const std::int64_t row_elems = row_elements(t);
  Shape shape = t.shape();
  shape[0] = rows[static_cast<std::size_t>(rank_)];
  Tensor out = Tensor::empty(shape, t.dtype(), Device::cuda);
  const std::size_t elem = dtype_size(t.dtype());
  auto stream = static_cast<cudaStream_t>(stream_);
  after_compute();
  // One reduce per rank to that rank (uneven shares), inside one group.
  check_nccl(ncclGroupStart(), "reduce_scatter");
  std::int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    const auto n = static_cast<std::size_t>(rows[static_cast<std::size_t>(r)] * row_elems);
    const void* src = static_cast<const char*>(t.raw_data()) + static_cast<std::size_t>(offset * row_elems) * elem;
    check_nccl(
        ncclReduce(src, out.raw_data(), n, nccl_type(t.dtype(), "reduce_scatter"), nccl_op(op), r, comm_, stream),
        "reduce_scatter");
    offset += rows[static_cast<std::size_t>(r)];
  }
  check_nccl(ncclGroupEnd(), "reduce_scatter");
  synchronize("NCCL reduce_scatter");
  return out;
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  check_gpu(t, "broadcast");
  after_compute();
  check_nccl(
      ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm_, static_cast<cudaStream_t>(stream_)),
      "broadcast");
  synchronize("NCCL broadcast");
}

void NcclCommunicator::barrier() {
  synchronize("NCCL barrier (collectives in flight)");
  bootstrap_->barrier();
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  ncclComm_t sub = nullptr;
  {
    CollectiveWatch mark("NCCL split (ncclCommSplit)");  // every rank takes part: a hung one would hang it
    check_nccl(ncclCommSplit(comm_, color, key, &sub, nullptr), "ncclCommSplit");
  }
  auto sizes = bootstrap_->split(color, key);
  std::unique_ptr<MpiCommunicator> mpi(static_cast<MpiCommunicator*>(sizes.release()));
  return std::unique_ptr<Communicator>(new NcclCommunicator(sub, std::move(mpi)));
}

}  // namespace tessera::dist
