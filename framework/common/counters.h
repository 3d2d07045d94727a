// Process-wide event counters (casts launched, host<->device copies) that tests read to show a
// change removes work: cheap relaxed atomics, always on, never part of any numeric result.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace tessera::counters {

enum class Event : int {
  device_casts,           // dtype casts run on the GPU (kernels::cast with a CUDA tensor)
  device_to_host_copies,  // copy_bytes from a CUDA pointer to host memory
  host_to_device_copies,  // copy_bytes from host memory to a CUDA pointer
  device_to_host_bytes,   // the bytes those device-to-host copies moved
  count_                  // number of events; keep last
};

inline constexpr std::array<std::string_view, static_cast<int>(Event::count_)> event_names{
    "device_casts", "device_to_host_copies", "host_to_device_copies", "device_to_host_bytes"};

inline std::atomic<std::int64_t>& slot(Event e) {
  static std::array<std::atomic<std::int64_t>, static_cast<int>(Event::count_)> values{};
  return values[static_cast<int>(e)];
}

inline void add(Event e, std::int64_t n = 1) { slot(e).fetch_add(n, std::memory_order_relaxed); }
inline std::int64_t read(Event e) { return slot(e).load(std::memory_order_relaxed); }
inline void reset() {
  for (int i = 0; i < static_cast<int>(Event::count_); ++i) slot(static_cast<Event>(i)).store(0);
}

}  // namespace tessera::counters
