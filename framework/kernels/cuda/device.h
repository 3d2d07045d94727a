// Shared by the CUDA twins' Tensor wrappers: argument checks and launch-error reporting.
#pragma once

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

}  // namespace tessera::cuda
