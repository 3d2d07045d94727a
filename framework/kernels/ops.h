// Every op of kernels/dispatch.h, once: the list that the backend-ops test
// (tests/backend_ops/test_backend_ops.cpp) runs on each backend built against the CPU, one test per
// op, failing for an op without a case, so a new op without a twin test fails CI (ggml's
// test-backend-ops). dispatch.cpp checks at compile time that each name is a dispatch function.
// Not listed: the inline conveniences over listed ops (add, sub, mul, div over binary;
// dropout_backward is dropout_forward) and the settings set_allow_tf32 and set_cpu_bf16_matmul.
#pragma once

// X(op) for each op, grouped as in dispatch.h.
// clang-format off
#define TESSERA_KERNEL_OPS(X)                                                                      \
  /* elementwise */                                                                                \
  X(binary) X(unary) X(affine) X(relu_backward) X(bias_relu_inplace) X(add_inplace) X(scale_inplace) X(sum_of_squares)  \
  X(sum_to_shape) X(broadcast_to) X(cast) X(full)                                                  \
  /* GEMM and layout */                                                                            \
  X(matmul) X(linear_bias_relu) X(matmul_batch_sum) X(permute) X(concat) X(index_rows)            \
  X(copy_time_range)                                                                               \
  /* reductions and softmax */                                                                     \
  X(sum_all) X(mean_all) X(sum_dim) X(mean_dim) X(softmax_lastdim) X(log_softmax_lastdim)          \
  X(softmax_backward) X(log_softmax_backward)                                                      \
  /* the Transformer's kernels */                                                                  \
  X(layer_norm_forward) X(layer_norm_backward) X(embedding_forward) X(embedding_backward)          \
  X(dropout_forward) X(cross_entropy_forward) X(cross_entropy_backward) X(cross_entropy_with_grad) \
  X(cross_entropy_shard_stats) X(cross_entropy_shard_backward)                                     \
  X(attention_forward) X(attention_backward)                                                       \
  /* beam search */                                                                                \
  X(beam_topk)                                                                                     \
  /* the optimizer */                                                                              \
  X(adam_update)
// clang-format on
