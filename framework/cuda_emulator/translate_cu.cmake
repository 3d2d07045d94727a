# Tessera's CUDA emulator: makes a C++ translation unit of a .cu file (cmake -DIN=x.cu -DOUT=x.cpp -P
# translate_cu.cmake). Two rewrites, both checked to leave nothing behind:
#   k<<<grid, block, shared, stream>>>(args)
#     -> launch(&k or nullptr, "k", [](auto&... a) { k(a...); }, Config(grid, block, shared, stream))(args)
#     (&k where the launch names k's template arguments: the key of its cudaFuncSetAttribute)
#   extern __shared__ T name[];  ->  T* const name = (the block's dynamic shared memory);
#   __shared__ T a[N], b[M];     ->  static T a[N], b[M]; poison_static_shared(a, sizeof a); ...
# Everything else compiles as it is against the emulator's cuda_runtime.h, cuda_bf16.h and mma.h.
file(READ "${IN}" text)
set(ns "::tessera::cuda_emulator")
set(call "[](auto&... tessera_emulated_args) { \\1(tessera_emulated_args...); }")
string(REGEX REPLACE "extern __shared__ (__align__\\([0-9]+\\) )?([^;[]*[^ ;[]) +([A-Za-z_][A-Za-z0-9_]*)\\[\\];"
       "\\2* const \\3 = reinterpret_cast<\\2*>(${ns}::dynamic_shared());" text "${text}")
# Static shared arrays (the matches hold no ';', which would split CMake's list).
string(REGEX MATCHALL "__shared__ [^;]*" declarations "${text}")
list(REMOVE_DUPLICATES declarations)
foreach(declaration IN LISTS declarations)
  # The declarators' names: each the last word before its ',' once the [N] are gone.
  string(REGEX REPLACE "\\[[^]]*\\]" "" names "${declaration}")
  string(REPLACE "," ";" names "${names}")
  string(REPLACE "__shared__ " "static " replacement "${declaration}")
  string(APPEND replacement ";")
  foreach(piece IN LISTS names)
    string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*[ ]*$" array "${piece}")
    string(STRIP "${array}" array)
    string(APPEND replacement " ${ns}::poison_static_shared(${array}, sizeof ${array});")
  endforeach()
  string(REPLACE "${declaration};" "${replacement}" text "${text}")
endforeach()
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_]*<[^<>();]*>)[ \t\r\n]*<<<"
       "${ns}::launch(\\1, \"\\1\", ${call}, ${ns}::Config(" text "${text}")
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_]*)[ \t\r\n]*<<<"
       "${ns}::launch(nullptr, \"\\1\", ${call}, ${ns}::Config(" text "${text}")
string(REPLACE ">>>(" "))(" text "${text}")
foreach(left "<<<" ">>>" "__shared__")
  string(FIND "${text}" "${left}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "translate_cu.cmake: ${IN}: '${left}' left after the rewrite: a launch or shared array in a form it does not know")
  endif()
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by framework/cuda_emulator/translate_cu.cmake: do not edit.\n#line 1 \"${IN}\"\n${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
