// Helpers shared by the unit tests.
#pragma once

#include <string>

#include "common/error.h"

namespace tessera::testing {

// The message of the tessera::Error (or subclass) that `fn` throws; "(no error)" when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tessera::testing
