// Errors that name what went wrong: the operation, the shapes, the key, the file.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An error that every rank of a job meets at the same point with the same message (a bad config, a
// gradient norm that is not finite): one rank prints it and all exit, with no job abort needed.
class EveryRankError : public Error {
 public:
  using Error::Error;
};

// Throws tessera::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Errors, warnings and notes on stderr. A write there that fails (a full disk, a closed pipe) has
// nowhere to be reported and is ignored; fmt::print would throw, and from an error path that ends
// the process in std::terminate (exit 134) instead of with the error's own status.
template <typename... Args>
void print_to_stderr(fmt::format_string<Args...> f, Args&&... args) {
  const std::string text = fmt::format(f, std::forward<Args>(args)...);
  (void)std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace tessera

// TESSERA_CHECK(cond, "op: shapes {} and {} differ", a, b)
#define TESSERA_CHECK(cond, ...)               \
  do {                                         \
    if (!(cond)) ::tessera::fail(__VA_ARGS__); \
  } while (0)
