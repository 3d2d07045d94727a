#include "common/progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// 75 -> "1:15"; 3725 -> "1:02:05".
std::string clock_time(double seconds) {
  const auto s = static_cast<std::int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

// 12.3 items a second, or 12345 when there are many (decimals would be noise there).
std::string rate_text(double rate, const std::string& unit) {
  return rate >= 100 ? fmt::format("{:.0f} {}/s", rate, unit) : fmt::format("{:.1f} {}/s", rate, unit);
}

}  // namespace

Progress::Style Progress::stderr_style() {
  if (const char* forced = std::getenv("TESSERA_PROGRESS")) {
    const std::string_view v = forced;
    if (v == "off") return Style::off;
    if (v == "terminal") return Style::terminal;
    if (v == "lines") return Style::lines;
  }
  return ::isatty(STDERR_FILENO) != 0 ? Style::terminal : Style::lines;
}

Progress::Progress(std::string what, std::string unit, std::int64_t total, bool shown)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      style_(shown ? stderr_style() : Style::off),
      start_(Clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}  // the first update draws at once

// Cut short (an error on the way): the terminal's line is ended, and no closing line claims the work done.
Progress::~Progress() {
  stop_ticking();
  if (!finished_ && drawn_) std::fputs("\n", stderr);
}

void Progress::set(std::int64_t done) {
  done_ = done;
  if (style_ == Style::terminal) draw(false);
}

void Progress::tick_while_silent() {
  if (style_ != Style::terminal || ticker_.joinable()) return;
  ticker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_; })) {
      lock.unlock();
      draw(true);
      lock.lock();
    }
  });
}

void Progress::stop_ticking() {
  if (!ticker_.joinable()) return;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  ticker_.join();
}

void Progress::finish(const std::string& note) {
  stop_ticking();
  finished_ = true;
  if (style_ == Style::off) return;
  const std::string text = note.empty() ? line(true) : fmt::format("{} {}", line(true), note);
  // On a terminal the closing line replaces the redrawn one ("\33[K" clears what is left of it).
  if (style_ == Style::terminal)
    fmt::print(stderr, "\r{}\33[K\n", text);
  else
    fmt::print(stderr, "{}\n", text);
  std::fflush(stderr);
}

// At most 5 redraws a second: a redraw per sentence would cost more than the work on a slow terminal.
void Progress::draw(bool force) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!force && seconds_since(last_draw_) < 0.2) return;
  last_draw_ = Clock::now();
  drawn_ = true;
  fmt::print(stderr, "\r{}\33[K", line(false));
  std::fflush(stderr);
}

std::string Progress::line(bool final) const {
  const double secs = seconds_since(start_);
  const std::int64_t done = done_;
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0.0;
  if (final) {
    if (done == 0) return fmt::format("{}: done in {:.1f}s", what_, secs);
    // Hundredths: benchmarks read a few seconds' decoding from this line.
    return fmt::format("{}: {} {} in {:.2f}s ({})", what_, done, unit_, secs, rate_text(rate, unit_));
  }
  if (done == 0) return fmt::format("{}: {} ...", what_, clock_time(secs));
  if (total_ <= 0)
    return fmt::format("{}: {} {} | {} | {}", what_, done, unit_, rate_text(rate, unit_), clock_time(secs));
  const double left = rate > 0 ? static_cast<double>(total_ - done) / rate : 0.0;
  return fmt::format("{}: {}/{} {} ({:.0f}%) | {} | ETA {}", what_, done, total_, unit_,
                     100.0 * static_cast<double>(done) / static_cast<double>(total_), rate_text(rate, unit_),
                     clock_time(left));
}

}  // namespace tessera
