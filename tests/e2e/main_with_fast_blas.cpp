// main() of the GoogleTest program that trains end to end: as `tessera` does, it first swaps
// OpenBLAS's fallback kernels for ones that fit the CPU (kernels/cpu/blas_core.h), so the tests
// run the kernels users get, and the longest test of the suite is not several times slower on a
// CPU the library does not know.
#include <gtest/gtest.h>

#include "kernels/cpu/blas_core.h"

int main(int argc, char** argv) {
  tessera::cpu::rerun_with_faster_blas_core(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
