// The CUDA emulator's streams and events: queued work (NCCL's), and what waits for it (see
// include/cuda_runtime.h for what is emulated).
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime_internal.h"

// ---- streams and events ----
// Kernels, copies and cuBLAS run when queued, so what a stream holds is StreamWork (NCCL): each
// queued piece knows what it waits for, and the last one queued on a stream stands for them all.
namespace tessera::cuda_emulator {

struct Queued {
  std::unique_ptr<StreamWork> work;
  std::vector<std::shared_ptr<Queued>> after;  // what it waits for
  bool started = false, done = false;
};

namespace {

using QueuedList = std::vector<std::shared_ptr<Queued>>;

// Advances `p` (after what it waits for) as far as it goes without blocking, or to its end.
bool progress(const std::shared_ptr<Queued>& p, bool block) {
  if (p == nullptr || p->done) return true;
  for (const auto& a : p->after)
    if (!progress(a, block)) return false;
  if (!p->started) {
    p->started = true;
    p->work->start();
  }
  if (!p->work->finish(block)) return false;
  p->done = true;
  p->work.reset();
  p->after.clear();  // no chain of finished work kept alive
  return true;
}
// Whether all of `list` is done (with `block`, once it is); the finished ones are dropped.
bool progress_all(QueuedList& list, bool block) {
  bool all = true;
  for (const auto& p : list) all = progress(p, block) && all;
  std::erase_if(list, [](const std::shared_ptr<Queued>& p) { return p == nullptr || p->done; });
  return all;
}

}  // namespace
}  // namespace tessera::cuda_emulator

struct CUstream_st {
  unsigned flags;
  std::shared_ptr<tessera::cuda_emulator::Queued> last;  // done once all queued on it is
  tessera::cuda_emulator::QueuedList waits;              // cudaStreamWaitEvent's, for what is queued next
};
struct CUevent_st {
  unsigned flags;
  bool recorded;
  tessera::cuda_emulator::QueuedList waits_for;  // done: the event has happened
};

namespace tessera::cuda_emulator {
namespace {

std::mutex g_stream_mutex;             // guards the lists; CUDA calls must come from one thread (see the header)
CUstream_st g_legacy{0, nullptr, {}};  // the default stream (0)
std::vector<CUstream_st*> g_streams;   // created ones
QueuedList g_orphans;                  // destroyed streams' work, still to complete

CUstream_st& resolve(cudaStream_t s) { return s != nullptr ? *s : g_legacy; }
bool blocking(const CUstream_st& s) { return (s.flags & cudaStreamNonBlocking) == 0; }

// What work queued on `s` now waits for: the stream's own, its cudaStreamWaitEvent's, and the
// legacy default stream's ties (its work waits for blocking streams' and theirs for its).
QueuedList prerequisites(cudaStream_t s) {
  CUstream_st& st = resolve(s);
  QueuedList out = st.waits;
  out.push_back(st.last);
  const auto tie = [&out](const CUstream_st& other) {
    out.insert(out.end(), other.waits.begin(), other.waits.end());
    out.push_back(other.last);
  };
  if (s == nullptr) {
    for (CUstream_st* other : g_streams)
      if (blocking(*other)) tie(*other);
  } else if (blocking(st)) {
    tie(g_legacy);
  }
  std::erase_if(out, [](const std::shared_ptr<Queued>& p) { return p == nullptr || p->done; });
  return out;
}

// Everything queued anywhere, done (cudaDeviceSynchronize, cudaFree).
void wait_for_device() {
  QueuedList all = g_orphans;
  for (CUstream_st* st : g_streams) {
    all.insert(all.end(), st->waits.begin(), st->waits.end());
    all.push_back(st->last);
  }
  all.insert(all.end(), g_legacy.waits.begin(), g_legacy.waits.end());
  all.push_back(g_legacy.last);
  progress_all(all, true);
  g_orphans.clear();
}

}  // namespace

std::shared_ptr<Queued> enqueue(cudaStream_t stream, std::unique_ptr<StreamWork> work,
                                const std::shared_ptr<Queued>& also_after) {
  std::lock_guard lock(g_stream_mutex);
  auto p = std::make_shared<Queued>();
  p->work = std::move(work);
  p->after = prerequisites(stream);
  if (also_after != nullptr && !also_after->done) p->after.push_back(also_after);
  CUstream_st& st = resolve(stream);
  st.waits.clear();  // p waits for them: the next work waits for p
  st.last = p;
  // Started at once when nothing holds it back (as a GPU would run it now); otherwise by the
  // query or synchronization that finds what it waits for done. Nothing is finished here: the
  // first check of a piece of work is the caller's.
  for (const auto& a : p->after)
    if (!a->done) return p;
  p->started = true;
  p->work->start();
  return p;
}

void wait_for(const std::shared_ptr<Queued>& work) {
  std::lock_guard lock(g_stream_mutex);
  progress(work, true);
}

void wait_before_work(cudaStream_t stream) {
  std::lock_guard lock(g_stream_mutex);
  QueuedList before = prerequisites(stream);
  progress_all(before, true);
  resolve(stream).waits.clear();
}

void report_failure(cudaError_t err, const char* what) {
  std::fprintf(stderr, "cuda emulator: %s\n", what);
  set_error(err);
}

}  // namespace tessera::cuda_emulator

using namespace tessera::cuda_emulator;

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  std::lock_guard lock(g_stream_mutex);
  *stream = new CUstream_st{flags, nullptr, {}};
  g_streams.push_back(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  // As on a GPU, its work goes on (and cudaDeviceSynchronize waits for it).
  g_orphans.push_back(stream->last);
  std::erase(g_streams, stream);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  {
    std::lock_guard lock(g_stream_mutex);
    CUstream_st& st = resolve(stream);
    QueuedList mine = st.waits;
    mine.push_back(st.last);
    progress_all(mine, true);
  }
  return sync_result();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (event == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  QueuedList& waits = resolve(stream).waits;
  waits.insert(waits.end(), event->waits_for.begin(), event->waits_for.end());
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = new CUevent_st{flags, false, {}};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  event->recorded = true;
  event->waits_for = prerequisites(stream);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidValue;
  {
    std::lock_guard lock(g_stream_mutex);
    progress_all(event->waits_for, true);
  }
  return sync_result();
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(g_stream_mutex);
  if (progress_all(event->waits_for, false)) return sync_result();
  set_error(cudaErrorNotReady);  // kept as the last error too, as the runtime may
  return cudaErrorNotReady;
}
cudaError_t cudaDeviceSynchronize() {
  {
    std::lock_guard lock(g_stream_mutex);
    wait_for_device();
  }
  return sync_result();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr || (start->flags & cudaEventDisableTiming) ||
      (end->flags & cudaEventDisableTiming))
    return cudaErrorInvalidValue;
  *ms = 0.0f;  // no timing in the emulator
  return cudaSuccess;
}
