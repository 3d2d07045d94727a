#include "kernels/cpu/blas_core.h"

#include <cblas.h>
#include <fmt/core.h>
#include <strings.h>
#include <unistd.h>

#include <array>
#include <cstdlib>

namespace tessera::cpu {
namespace {

// Set, for the rerun, to the core OpenBLAS had loaded: the logs say why the kernels differ.
constexpr const char* kFallbackVariable = "TESSERA_OPENBLAS_FALLBACK_CORE";

}  // namespace

CpuVectorSupport cpu_vector_support() {
  CpuVectorSupport s;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's (and compiler-rt's) checks include the OS's: the registers are saved on a switch (XGETBV).
  __builtin_cpu_init();
  s.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  s.avx512 = s.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return s;
}

std::string_view faster_blas_core(std::string_view loaded, CpuVectorSupport cpu) {
  // Intel's cores before Haswell, and what the fallback picks for an unknown CPU (Prescott; since
  // 0.3.19 also Nehalem or Sandybridge by the instructions it sees).
  static constexpr std::array<std::string_view, 11> older_than_avx2 = {
      "Katmai", "Coppermine", "Northwood",  "Prescott", "Banias",     "Atom",
      "Core2",  "Penryn",     "Dunnington", "Nehalem",  "Sandybridge"};
  if (!cpu.avx2_fma) return "";
  for (std::string_view core : older_than_avx2)
    if (loaded.size() == core.size() && strncasecmp(loaded.data(), core.data(), core.size()) == 0)
      return cpu.avx512 ? "SkylakeX" : "Haswell";
  return "";
}

void rerun_with_faster_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice, or this rerun
  if (std::string_view(openblas_get_config()).find("DYNAMIC_ARCH") == std::string_view::npos) return;
  const std::string loaded = openblas_get_corename();
  const std::string_view core = faster_blas_core(loaded, cpu_vector_support());
  if (core.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", std::string(core).c_str(), 1) != 0 ||
      setenv(kFallbackVariable, loaded.c_str(), 1) != 0)
    return;
  // The program's own path, not /proc/self/exe: the kernel names the process after the file it
  // runs, and ps, top, pgrep and killall look for "tessera", not "exe".
  std::array<char, 4096> self{};
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n > 0 && static_cast<std::size_t>(n) < self.size() - 1) execv(self.data(), argv);
  // No exec (no /proc, a sandbox): go on as loaded, and leave the environment as it was.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kFallbackVariable);
}

std::string blas_description() {
  const std::string_view config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const std::string version(config.substr(0, config.find(' ', config.find(' ') + 1)));
  std::string what = fmt::format("{}, {} kernels", version, openblas_get_corename());
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  const char* fallback = std::getenv(kFallbackVariable);
  if (chosen != nullptr && fallback != nullptr)
    what +=
        fmt::format(" (chosen by tessera: the library took this CPU for a {}; OPENBLAS_CORETYPE chooses)", fallback);
  else if (chosen != nullptr)
    what += fmt::format(" (OPENBLAS_CORETYPE={})", chosen);
  return what;
}

}  // namespace tessera::cpu
