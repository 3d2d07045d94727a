// Progress of long work (encoding a corpus, training a vocabulary, averaging checkpoints,
// translating a file) on stderr. On a terminal one line is redrawn: done / total, rate and ETA.
// Elsewhere (a cluster's log file) one line is written when the work ends, so logs stay short.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace tessera {

class Progress {
 public:
  enum class Style { off, terminal, lines };
  // The style for stderr: TESSERA_PROGRESS=off|terminal|lines when set, else terminal when stderr
  // is one, else lines.
  static Style stderr_style();

  // `what` names the work ("translate"), `unit` its items ("sentences"); `total` 0: not known (no
  // ETA). `shown` false: silent (every rank but 0 of a job).
  Progress(std::string what, std::string unit, std::int64_t total, bool shown = true);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress();

  void set(std::int64_t done);
  void add(std::int64_t items) { set(done_ + items); }
  std::int64_t done() const { return done_; }
  // For work that says nothing while it runs (SentencePiece's training): the terminal line shows
  // the time so far, redrawn every half second, until finish().
  void tick_while_silent();
  // The closing line, e.g. "translate: 1000 sentences in 7.4s (135.1 sentences/s)".
  void finish(const std::string& note = "");

 private:
  void draw(bool force);
  std::string line(bool final) const;
  void stop_ticking();

  std::string what_, unit_;
  std::int64_t total_ = 0;
  std::atomic<std::int64_t> done_{0};
  Style style_;
  bool finished_ = false, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mutex_;  // draws from the ticking thread and the worker
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread ticker_;
};

}  // namespace tessera
