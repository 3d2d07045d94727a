#include "dist/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <thread>

namespace tessera::dist {
namespace {

MPI_Datatype mpi_type(DType t, const char* op) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT;
    default:
      fail("{}: MPI collectives take float32, float64 or int32 tensors, got {}", op, dtype_name(t));
  }
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("{}: MPI error: {}", what, std::string(text, static_cast<std::size_t>(len)));
}

void check_cpu(const Tensor& t, const char* op) {
  TESSERA_CHECK(t.defined() && t.device() == Device::cpu, "{}: the MPI backend takes CPU tensors", op);
}

int count_of(const Tensor& t, const char* op) {
  TESSERA_CHECK(t.numel() <= std::numeric_limits<int>::max(), "{}: {} elements exceed MPI's int count", op, t.numel());
  return static_cast<int>(t.numel());
}

void scale_in_place(Tensor& t, double f) {
  dispatch_float("all_reduce(average)", t.dtype(), [&]<typename T>() {
    T* p = t.data<T>();
    const auto s = static_cast<T>(f);
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] *= s;
  });
}

// The watchdog: collectives note when they start; a thread checks once a second.
std::atomic<double> g_timeout_s{0};
std::atomic<const char*> g_timeout_setting{""};  // named in its message
std::atomic<void (*)()> g_timeout_cleanup{nullptr};
std::atomic<std::string (*)()> g_timeout_explain{nullptr};
std::atomic<std::int64_t> g_collective_start_ms{0};  // 0: not in a collective
std::atomic<const char*> g_collective_name{""};
std::atomic<int> g_untimed{0};  // live UntimedCollectives
// This process's rank in MPI_COMM_WORLD, noted at MPI_Init (the launcher's until then): under
// MPI_THREAD_FUNNELED the watchdog thread may not call MPI itself.
std::atomic<int> g_world_rank{-1};
// agree_on_error's own communicator: duplicated at MPI_Init, when every rank is there.
MPI_Comm g_arrival_comm = MPI_COMM_NULL;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watchdog_loop() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double timeout = g_timeout_s;
    const std::int64_t start = g_collective_start_ms;
    if (timeout <= 0 || start == 0 || g_untimed > 0) continue;
    const double waited = static_cast<double>(now_ms() - start) / 1000.0;
    if (waited > timeout) {
      const int rank = g_world_rank;
      std::string (*explain)() = g_timeout_explain;
      const std::string why = explain ? explain() : std::string();
      std::fprintf(stderr,
                   "tessera: error on rank %d: %s has waited %.0f s (%s = %.0f): another rank has died or hangs%s%s; "
                   "exiting so the launcher ends the job\n",
                   rank, g_collective_name.load(), waited, g_timeout_setting.load(), timeout, why.empty() ? "" : ": ",
                   why.c_str());
      std::fflush(stderr);
      if (void (*cleanup)() = g_timeout_cleanup) cleanup();
      std::_Exit(1);
    }
  }
}

class MpiRequest final : public Request {
 public:
  // `name` (a string literal) names the waits; `finished` runs once it has completed; `t` (the
  // buffer) is kept alive while MPI uses it.
  MpiRequest(const char* name, MPI_Request req, Tensor t, std::function<void()> finished = nullptr)
      : name_(name), req_(req), tensor_(std::move(t)), finished_(std::move(finished)) {}
  ~MpiRequest() override {
    if (done_) return;
    CollectiveWatch mark(name_);  // unwinding past a dead peer ends too
    MPI_Wait(&req_, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (done_) return;
    CollectiveWatch mark(name_);
    check_mpi(MPI_Wait(&req_, MPI_STATUS_IGNORE), name_);
    finish();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), name_);
    if (flag) finish();
    return done_;
  }

 private:
  void finish() {
    done_ = true;
    if (finished_) finished_();
  }
  const char* name_;
  MPI_Request req_;
  Tensor tensor_;
  std::function<void()> finished_;
  bool done_ = false;
};

}  // namespace

CollectiveWatch::CollectiveWatch(const char* name) : nested_(g_collective_start_ms != 0) {
  if (nested_) return;
  g_collective_name = name;
  g_collective_start_ms = now_ms();
}
CollectiveWatch::~CollectiveWatch() {
  if (!nested_) g_collective_start_ms = 0;
}

UntimedCollectives::UntimedCollectives() { ++g_untimed; }
UntimedCollectives::~UntimedCollectives() { --g_untimed; }

void set_collective_timeout(double seconds, const char* setting, int world_rank) {
  static std::once_flag started;
  g_timeout_setting = setting;
  g_timeout_s = seconds;
  if (!mpi_initialized()) g_world_rank = world_rank;
  if (seconds > 0) std::call_once(started, [] { std::thread(watchdog_loop).detach(); });
}

bool mpi_initialized() {
  int init = 0;
  MPI_Initialized(&init);
  return init != 0;
}

void ensure_mpi_initialized() {
  if (mpi_initialized()) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // Errors come back as codes we turn into messages naming the operation.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  g_world_rank = world_rank;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &g_arrival_comm), "MPI_Comm_dup");
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

ErrorAgreement agree_on_error(std::uint64_t message_hash, double window_s) {
  ErrorAgreement out;
  try {
    ensure_mpi_initialized();
    int rank = 0;
    MPI_Comm_rank(g_arrival_comm, &rank);
    // Rank 0's hash, as the max of it and the others' zeros. Static: past the deadline the request
    // stays pending, and MPI may still write to its buffers after this function has returned (it
    // runs once per process).
    static std::uint64_t mine = 0, rank_0s = 0;
    mine = rank == 0 ? message_hash : 0;
    MPI_Request req;
    if (MPI_Iallreduce(&mine, &rank_0s, 1, MPI_UINT64_T, MPI_MAX, g_arrival_comm, &req) != MPI_SUCCESS) return out;
    const std::int64_t deadline = now_ms() + static_cast<std::int64_t>(window_s * 1000.0);
    for (;;) {
      int done = 0;
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return out;
      if (done) break;
      if (now_ms() > deadline) return out;  // the request stays pending: the job is about to end
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    out.every_rank = true;
    out.same_as_rank_0 = message_hash == rank_0s;
  } catch (const Error&) {  // MPI could not start: not every rank is known to have met one
  }
  return out;
}

double collective_timeout() { return g_timeout_s; }

void at_collective_timeout(void (*cleanup)()) { g_timeout_cleanup = cleanup; }

void at_collective_timeout_explain(std::string (*explain)()) { g_timeout_explain = explain; }

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  CollectiveWatch mark("MPI start (MPI_Init_thread, MPI_Comm_dup)");  // each waits for every rank
  ensure_mpi_initialized();
  MPI_Comm dup;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
  return std::make_unique<MpiCommunicator>(dup);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_cpu(t, "all_reduce");
  CollectiveWatch mark("all_reduce");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), count_of(t, "all_reduce"), mpi_type(t.dtype(), "all_reduce"),
                          MPI_SUM, comm_),
            "all_reduce");
  if (op == ReduceOp::average) scale_in_place(t, 1.0 / size_);
}

std::unique_ptr<Request> MpiCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  check_cpu(t, "all_reduce_async");
  MPI_Request req;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), count_of(t, "all_reduce_async"),
                           mpi_type(t.dtype(), "all_reduce_async"), MPI_SUM, comm_, &req),
            "all_reduce_async");
  std::function<void()> average;
  if (op == ReduceOp::average) average = [t, n = size_]() mutable { scale_in_place(t, 1.0 / n); };
  return std::make_unique<MpiRequest>("all_reduce_async (wait)", req, t, std::move(average));
}

std::unique_ptr<Request> MpiCommunicator::reduce_scatter_async(Tensor& t, ReduceOp op) {
  check_cpu(t, "reduce_scatter_async");
  check_equal_blocks("reduce_scatter_async", t, size_);
  const std::int64_t block = t.numel() / size_;
  MPI_Request req;
  // In place MPI leaves the result at the start of the buffer: it moves to this rank's block after.
  check_mpi(MPI_Ireduce_scatter_block(MPI_IN_PLACE, t.raw_data(), count_of(t, "reduce_scatter_async") / size_,
                                      mpi_type(t.dtype(), "reduce_scatter_async"), MPI_SUM, comm_, &req),
            "reduce_scatter_async");
  auto place = [t, block, rank = rank_, n = size_, average = op == ReduceOp::average]() mutable {
    Tensor mine = t.narrow_rows(block * rank, block);
    if (rank > 0) std::memmove(mine.raw_data(), t.raw_data(), mine.nbytes());
    if (average) scale_in_place(mine, 1.0 / n);
  };
  return std::make_unique<MpiRequest>("reduce_scatter_async (wait)", req, t, std::move(place));
}

std::unique_ptr<Request> MpiCommunicator::all_gather_async(Tensor& t) {
  check_cpu(t, "all_gather_async");
  check_equal_blocks("all_gather_async", t, size_);
  MPI_Request req;
  // In place: this rank's block is already where the result puts it.
  check_mpi(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.raw_data(), count_of(t, "all_gather_async") / size_,
                           mpi_type(t.dtype(), "all_gather_async"), comm_, &req),
            "all_gather_async");
  return std::make_unique<MpiRequest>("all_gather_async (wait)", req, t);
}

Tensor MpiCommunicator::all_gather(const Tensor& t) {
  check_cpu(t, "all_gather");
  TESSERA_CHECK(t.dim() >= 1, "all_gather: needs a tensor with a first dimension, got a scalar");
  CollectiveWatch mark("all_gather");
  const std::int64_t row_elems = row_elements(t);
  // Every rank's row count first, so uneven shares work.
  std::vector<std::int64_t> rows(static_cast<std::size_t>(size_));
  std::int64_t mine = t.size(0);
  check_mpi(MPI_Allgather(&mine, 1, MPI_INT64_T, rows.data(), 1, MPI_INT64_T, comm_), "all_gather");
  std::vector<int> counts(rows.size()), displs(rows.size());
  std::int64_t total = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    counts[r] = static_cast<int>(rows[r] * row_elems);
    displs[r] = static_cast<int>(total * row_elems);
    total += rows[r];
  }
  TESSERA_CHECK(total * row_elems <= std::numeric_limits<int>::max(),
                "all_gather: {} elements in all, more than MPI's int counts reach (gather in parts)",
                total * row_elems);
  Shape out_shape = t.shape();
  out_shape[0] = total;
  Tensor out = Tensor::empty(out_shape, t.dtype());
  const MPI_Datatype type = mpi_type(t.dtype(), "all_gather");
  check_mpi(MPI_Allgatherv(t.raw_data(), counts[static_cast<std::size_t>(rank_)], type, out.raw_data(), counts.data(),
                           displs.data(), type, comm_),
            "all_gather");
  return out;
}

Tensor MpiCommunicator::reduce_scatter(const Tensor& t, const std::vector<std::int64_t>& rows, ReduceOp op) {
  check_cpu(t, "reduce_scatter");
  TESSERA_CHECK(t.dim() >= 1, "reduce_scatter: needs a tensor with a first dimension, got a scalar");
  CollectiveWatch mark("reduce_scatter");
  check_row_shares(rows, size_, t.size(0));
  const std::int64_t row_elems = row_elements(t);
  std::vector<int> counts(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) counts[r] = static_cast<int>(rows[r] * row_elems);
  Shape out_shape = t.shape();
  out_shape[0] = rows[static_cast<std::size_t>(rank_)];
  Tensor out = Tensor::empty(out_shape, t.dtype());
  check_mpi(MPI_Reduce_scatter(t.raw_data(), out.raw_data(), counts.data(), mpi_type(t.dtype(), "reduce_scatter"),
                               MPI_SUM, comm_),
            "reduce_scatter");
  if (op == ReduceOp::average) scale_in_place(out, 1.0 / size_);
  return out;
}

void MpiCommunicator::broadcast(Tensor& t, int root) {
  check_cpu(t, "broadcast");
  TESSERA_CHECK(root >= 0 && root < size_, "broadcast: root {} is not a rank of this group of {}", root, size_);
  CollectiveWatch mark("broadcast");
  // int32 tensors and bfloat16 bits travel as bytes: a broadcast needs no arithmetic.
  check_mpi(MPI_Bcast(t.raw_data(), static_cast<int>(t.numel() * dtype_size(t.dtype())), MPI_BYTE, root, comm_),
            "broadcast");
}

void MpiCommunicator::barrier() {
  CollectiveWatch mark("barrier");
  check_mpi(MPI_Barrier(comm_), "barrier");
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm sub;
  CollectiveWatch mark("split");
  check_mpi(MPI_Comm_split(comm_, color, key, &sub), "split");
  return std::make_unique<MpiCommunicator>(sub);
}

namespace {
// This process's index among this machine's ranks of `comm`, or (`size`) their number.
int of_local_ranks(MPI_Comm comm, int rank, bool size) {
  MPI_Comm local;
  CollectiveWatch mark(size ? "local_size (MPI_Comm_split_type)" : "local_rank (MPI_Comm_split_type)");
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local), "local ranks");
  int r = 0;
  if (size)
    MPI_Comm_size(local, &r);
  else
    MPI_Comm_rank(local, &r);
  MPI_Comm_free(&local);
  return r;
}
}  // namespace

int MpiCommunicator::local_rank() const { return of_local_ranks(comm_, rank_, false); }
int MpiCommunicator::local_size() const { return of_local_ranks(comm_, rank_, true); }

std::vector<std::vector<std::int32_t>> all_gather_sequences(Communicator& comm,
                                                            const std::vector<std::vector<std::int32_t>>& mine) {
  std::vector<std::int32_t> lengths, ids;
  for (const auto& s : mine) {
    TESSERA_CHECK(s.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
                  "all_gather_sequences: a sequence of {} ids", s.size());
    lengths.push_back(static_cast<std::int32_t>(s.size()));
    ids.insert(ids.end(), s.begin(), s.end());
  }
  const Tensor all_lengths = comm.all_gather(Tensor::from(lengths, {static_cast<std::int64_t>(lengths.size())}));
  const Tensor all_ids = comm.all_gather(Tensor::from(ids, {static_cast<std::int64_t>(ids.size())}));
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(all_lengths.numel()));
  const std::int32_t* t = all_ids.data<std::int32_t>();
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int32_t len = all_lengths.data<std::int32_t>()[i];
    out[i].assign(t, t + len);
    t += len;
  }
  return out;
}

std::int64_t row_elements(const Tensor& t) { return shape_numel(Shape(t.shape().begin() + 1, t.shape().end())); }

void check_row_shares(const std::vector<std::int64_t>& rows, int ranks, std::int64_t total) {
  TESSERA_CHECK(static_cast<int>(rows.size()) == ranks, "reduce_scatter: {} row counts for {} ranks", rows.size(),
                ranks);
  for (const std::int64_t r : rows) TESSERA_CHECK(r >= 0, "reduce_scatter: a negative row count ({})", r);
  const std::int64_t sum = std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
  TESSERA_CHECK(sum == total, "reduce_scatter: row counts add up to {}, the tensor has {} rows", sum, total);
}

void check_equal_blocks(const char* op, const Tensor& t, int ranks) {
  TESSERA_CHECK(t.defined() && t.dim() == 1 && t.numel() % ranks == 0, "{}: {} does not split into {} equal blocks", op,
                t.defined() ? t.describe() : std::string("an undefined tensor"), ranks);
}

std::optional<std::pair<int, int>> ranks_sharing_a_gpu(Communicator& comm, const std::array<std::int32_t, 4>& uuid) {
  const Tensor all = comm.all_gather(Tensor::from(std::vector<std::int32_t>(uuid.begin(), uuid.end()), {1, 4}));
  const auto* u = all.data<std::int32_t>();
  for (int a = 0; a < comm.size(); ++a)
    for (int b = a + 1; b < comm.size(); ++b)
      if (std::equal(u + 4 * a, u + 4 * a + 4, u + 4 * b)) return std::pair{a, b};
  return std::nullopt;
}

int count_ranks(bool flag, Communicator* comm) {
  Tensor t = Tensor::from(std::vector<std::int32_t>{flag ? 1 : 0}, {1});
  if (comm != nullptr && comm->size() > 1) comm->all_reduce(t, ReduceOp::sum);
  return t.data<std::int32_t>()[0];
}

std::uint64_t broadcast_u64(std::uint64_t value, Communicator* comm) {
  if (comm == nullptr || comm->size() == 1) return value;
  Tensor t = Tensor::from(
      std::vector<std::int32_t>{static_cast<std::int32_t>(value >> 32), static_cast<std::int32_t>(value & 0xffffffffU)},
      {2});
  comm->broadcast(t, 0);
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t.data<std::int32_t>()[0])) << 32) |
         static_cast<std::uint32_t>(t.data<std::int32_t>()[1]);
}

std::vector<std::int64_t> even_split(std::int64_t n, int parts) {
  TESSERA_CHECK(parts >= 1, "even_split: {} parts", parts);
  std::vector<std::int64_t> out(static_cast<std::size_t>(parts), n / parts);
  for (std::int64_t i = 0; i < n % parts; ++i) out[static_cast<std::size_t>(i)] += 1;
  return out;
}

}  // namespace tessera::dist
