#!/bin/sh
# bundle.sh refuses a -march=native build, whatever true value CMake holds (ON, 1, true): each try
# prints its refusal and status=1.
# Usage: bundle_refuses_a_native_build.sh WORKDIR
work=$1
mkdir -p "$work" &&
  for value in ON 1 true; do
    echo TESSERA_NATIVE_ARCH:BOOL=$value > "$work/CMakeCache.txt"
    bash "$(dirname "$0")/bundle.sh" "$work" "$work/out"
    echo status=$?
  done
