// Shared by the CUDA twins' Tensor wrappers: argument checks and launch-error reporting.
#pragma once

#include <cstdint>
#include <optional>

#include "common/error.h"
#include "kernels/cuda/launch.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

// float32 or bfloat16 on the GPU, else an error naming `op` and the tensor.
Elem elem_of(const char* op, const Tensor& t);
// The tensor must live on the GPU.
void check_on_gpu(const char* op, const Tensor& t);
// Throws "op: <what> failed: <CUDA's message>" when err is not cudaSuccess.
void check_launch(const char* op, cudaError_t err);
// int32 ids on the GPU (a CPU tensor is copied there).
Tensor ids_on_gpu(const Tensor& ids);
// Ids checked on the host (a GPU kernel reading out of range fails far from the cause), then on
// the GPU: kernels::check_ids's rules.
Tensor checked_ids(const char* op, const Tensor& ids, std::int64_t vocab, std::optional<std::int32_t> ignore_index);
// An uninitialized CUDA tensor shaped and typed like t; a float32 one of `shape`.
Tensor empty_like(const Tensor& t);
Tensor f32_on_gpu(const Shape& shape);
// t must be a float32 CUDA tensor (`what` names it in the error).
void check_f32_gpu(const char* op, const Tensor& t, const char* what);

}  // namespace tessera::cuda
