// Multi-head attention (Vaswani et al. 2017, section 3.2.2): self-attention when queries, keys and
// values come from one sequence, cross-attention when keys and values come from another (the
// encoder's output). Under tensor parallelism each rank holds heads / tp whole heads: Q, K and V
// are column-parallel, the output projection row-parallel.
#pragma once

#include <string>
#include <vector>

#include "nn/column_parallel_linear.h"
#include "nn/row_parallel_linear.h"

namespace tessera::nn {

// Keys and values of the positions attended so far (incremental decoding), held in buffers
// [rows, H, capacity, dk] of which positions [0, length) are filled. A self-attention cache starts
// empty and each step writes its position in place (reserve the capacity up front: a full buffer
// is doubled); a cross-attention one holds the memory's, computed once. Reordering rows (beam
// search) copies the filled positions into a spare buffer; keeping a prefix of rows copies nothing.
// On the CPU nothing is copied when rows are reordered. A cross-attention cache keeps its rows (one
// a sentence) and maps each live row to one of them (row_map). A self-attention cache is held step
// by step, [capacity, rows, H, dk] (step_major()): a step's keys are written once, and each live
// row keeps which row of every step its history passes through (key_rows), which attention reads.
class KeyValueCache {
 public:
  KeyValueCache() = default;
  explicit KeyValueCache(std::int64_t capacity) : capacity_(capacity) {}
  KeyValueCache(const Tensor& k, const Tensor& v);  // full: [B, H, L, dk] each

  // Writes one position k_new, v_new [rows, H, 1, dk] at `length`; the first write sets the rows.
  void append(const Tensor& k_new, const Tensor& v_new);
  // Keeps only the given rows (beam search reorders hypotheses), in the given order.
  void select_rows(const std::vector<std::int64_t>& rows);

  // The live rows' buffers [rows, H, capacity, dk] (views): attention reads their first length().
  // With a row map, all the rows held, which live row i reads at row_map()[i]. Step-major: the
  // whole buffers [capacity, rows held, H, dk].
  Tensor keys() const { return row_map_.defined() || step_major_ ? k_ : k_.narrow_rows(0, rows_); }
  Tensor values() const { return row_map_.defined() || step_major_ ? v_ : v_.narrow_rows(0, rows_); }
  // int32 [rows()] on the host: the row of keys() each live row reads; undefined: its own.
  const Tensor& row_map() const { return row_map_; }
  // Step-major: int32 [rows(), capacity] on the host, the row of step t that live row i's history
  // holds at [i][t]; undefined otherwise.
  Tensor key_rows() const { return step_major_ ? lineage_.narrow_rows(0, rows_) : Tensor(); }
  bool step_major() const { return step_major_; }
  // The live rows' keys (values) [rows, H, length, dk] on the host, whatever the layout (for tests).
  Tensor history(bool values) const;
  std::int64_t length() const { return length_; }
  std::int64_t rows() const { return rows_; }

 private:
  void grow(std::int64_t rows, std::int64_t capacity);   // new buffers, the filled positions copied
  void map_rows(const std::vector<std::int64_t>& rows);  // a fixed cache's select_rows, on the CPU
  void start_step_major(const Tensor& k_new);
  void append_step_major(const Tensor& k_new, const Tensor& v_new);
  void select_rows_step_major(const std::vector<std::int64_t>& rows);
  void resize_step_major(std::int64_t rows, std::int64_t capacity);  // the filled steps copied

  Tensor k_, v_, k_spare_, v_spare_;
  Tensor row_map_;
  Tensor lineage_;      // step-major: int32 [rows held, capacity]
  bool fixed_ = false;  // the memory's keys and values: never appended to
  bool step_major_ = false;
  std::int64_t rows_ = 0, length_ = 0, capacity_ = 0;
};

class MultiHeadAttention {
 public:
  MultiHeadAttention() = default;
  // Parameters `name`.{q,k,v,out}_proj.{weight,bias}, d_model -> d_model; the weights draw from
  // next_seed, ..., next_seed + 3, which it advances past.
  MultiHeadAttention(const std::string& name, std::int64_t d_model, std::int64_t heads, std::uint64_t& next_seed,
                     const Placement& placement);

  // query [B, Lq, d_model] attends to key_value [B, Lk, d_model] (the same Var: self-attention),
  // with key_padding [B, Lk] int32 (1: ignore; undefined: none) and an optional causal mask.
  ag::Var operator()(const ag::Var& query, const ag::Var& key_value, const Tensor& key_padding, bool causal) const;

  // Incremental decoding (no graph is needed): the cross-attention cache of `memory`...
  KeyValueCache project_memory(const ag::Var& memory) const;
  // ...attention of one new position x [B, 1, d_model] to a fixed cache...
  ag::Var attend_cached(const ag::Var& x, const KeyValueCache& cache, const Tensor& key_padding) const;
  // ...and self-attention of one new position to itself and the cached ones, appending its own.
  ag::Var step(const ag::Var& x, KeyValueCache& cache) const;

  std::vector<Parameter> parameters() const;

 private:
  ag::Var split_heads(const ag::Var& x) const;  // [B, L, d] -> [B, H, L, dk]
  ag::Var merge_heads(const ag::Var& x) const;  // [B, H, L, dk] -> [B, L, d]
  ag::Var attend_cache(const ag::Var& q, const KeyValueCache& cache, const Tensor& key_padding) const;

  ColumnParallelLinear q_, k_, v_;
  RowParallelLinear out_;
  std::int64_t local_heads_ = 0;  // heads of this rank
  std::int64_t head_dim_ = 0;
};

}  // namespace tessera::nn
