// Which kernels OpenBLAS runs. It picks them for the CPU when the library loads; versions before
// 0.3.25 fall back to their SSE3 "Prescott" kernels on Intel CPUs newer than themselves (Debian
// 12's 0.3.21 on Emerald Rapids, OpenMathLib/OpenBLAS#4267), about 3x slower than the AVX-512
// ones there. The environment variable OPENBLAS_CORETYPE, read at load time, chooses instead.
#pragma once

#include <string>
#include <string_view>

namespace tessera::cpu {

// The vector instructions this CPU and its operating system can run.
struct CpuVectorSupport {
  bool avx2_fma = false;
  bool avx512 = false;  // AVX-512 F, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use
};
CpuVectorSupport cpu_vector_support();

// The OpenBLAS core to ask for instead of `loaded` (openblas_get_corename()): "SkylakeX" or
// "Haswell" when `loaded` is one of the cores older than AVX2 that the fallback picks while `cpu`
// runs AVX2 or more; "" when `loaded` is right (also a core of AMD's own, which OpenBLAS picks on
// purpose).
std::string_view faster_blas_core(std::string_view loaded, CpuVectorSupport cpu);

// Runs this program again from the start (execv of its own file, with the same arguments) with
// OPENBLAS_CORETYPE set to faster_blas_core(), when OpenBLAS is a DYNAMIC_ARCH build that loaded
// slower kernels than the CPU runs and OPENBLAS_CORETYPE is not set: the variable counts only when
// the library loads. Call it first in main, before any thread or file is opened. Returns when
// nothing is to be done or the exec failed (the program then goes on with the slower kernels).
void rerun_with_faster_blas_core(char** argv);

// For logs: "OpenBLAS 0.3.21, SkylakeX kernels", with why where the kernels were not the
// library's own choice ("OPENBLAS_CORETYPE=..." or this program's choice over its fallback).
std::string blas_description();

}  // namespace tessera::cpu
