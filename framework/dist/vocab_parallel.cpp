#include "dist/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "dist/parallel_ops.h"
#include "dist/sharding.h"
#include "kernels/dispatch.h"

namespace tessera::dist {
namespace {

constexpr std::int32_t kOtherRanksId = -1;  // the embedding's zero_id

// Per row of the whole vocabulary: log of sum of exp(z - max), and the loss and NLL of the row.
struct RowLoss {
  double lse = 0, loss = 0, nll = 0;
};

// Combines the ranks' statistics of one row (cross_entropy_shard_stats: max, sum of exp(z - max),
// sum of (z - max), z_target - max) as cpu::cross_entropy_forward computes the whole row's loss.
RowLoss combine_row(const std::vector<double>& all, std::int64_t n, std::int64_t i, std::int32_t target,
                    const std::vector<BlockRange>& blocks, std::int64_t vocab, double smoothing) {
  const auto stat = [&](std::size_t r, int k) { return all[(r * static_cast<std::size_t>(n) + i) * 4 + k]; };
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t r = 0; r < blocks.size(); ++r) m = std::max(m, stat(r, 0));
  double sum_exp = 0, sum_shifted = 0, target_shifted = 0;
  for (std::size_t r = 0; r < blocks.size(); ++r) {
    const double shift = stat(r, 0) - m;
    sum_exp += stat(r, 1) * std::exp(shift);
    sum_shifted += stat(r, 2) + static_cast<double>(blocks[r].count) * shift;
    if (target >= blocks[r].start && target < blocks[r].start + blocks[r].count) target_shifted = stat(r, 3) + shift;
  }
  const double log_sum = std::log(sum_exp);
  RowLoss row{m + log_sum, 0, 0};
  row.nll = log_sum - target_shifted;
  // Without smoothing the uniform part is left out, as the whole-row kernel does.
  row.loss = (1 - smoothing) * row.nll +
             (smoothing > 0 ? smoothing * (log_sum - sum_shifted / static_cast<double>(vocab)) : 0.0);
  return row;
}

}  // namespace

VocabBlock vocab_block(std::int64_t vocab, const Communicator& group) {
  TESSERA_CHECK(vocab >= group.size(), "vocabulary parallelism: {} ids do not split over {} tensor-parallel ranks",
                vocab, group.size());
  const BlockRange b = block_range(vocab, group.rank(), group.size());
  return {b.start, b.count, vocab};
}

ag::Var vocab_parallel_embedding(const ag::Var& block_table, const Tensor& ids, const VocabBlock& block,
                                 Communicator& group) {
  TESSERA_CHECK(ids.dtype() == DType::i32 && ids.device() == Device::cpu,
                "vocab_parallel_embedding: ids must be int32 on the CPU, got {}", ids.describe());
  kernels::check_ids("vocab_parallel_embedding", ids, block.vocab, std::nullopt);
  Tensor local = Tensor::empty(ids.shape(), DType::i32);
  const std::int32_t* id = ids.data<std::int32_t>();
  std::int32_t* out = local.data<std::int32_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    const std::int64_t row = id[i] - block.first;
    out[i] = row >= 0 && row < block.count ? static_cast<std::int32_t>(row) : kOtherRanksId;
  }
  return reduce_from_tensor_parallel(ag::embedding(block_table, local, kOtherRanksId), group);
}

ag::Var vocab_parallel_cross_entropy(const ag::Var& logits, const Tensor& targets, double smoothing,
                                     std::int32_t ignore_index, const VocabBlock& block, Communicator& group,
                                     double* nll_sum) {
  const char* op = "vocab_parallel_cross_entropy";
  const Tensor z = logits.value();
  TESSERA_CHECK(z.dim() == 2 && z.size(1) == block.count && targets.shape() == Shape{z.size(0)},
                "{}: logits {} and targets {} for a block of {} ids", op, z.describe(), targets.describe(),
                block.count);
  TESSERA_CHECK(smoothing >= 0.0 && smoothing < 1.0, "{}: label smoothing {} outside [0, 1)", op, smoothing);
  kernels::check_ids(op, targets, block.vocab, ignore_index);
  const std::int64_t n = z.size(0);
  const Tensor stats = kernels::cross_entropy_shard_stats(z, targets, block.first).to(Device::cpu);
  const std::vector<double> all = group.all_gather(stats).to_doubles();  // [ranks * n, 4]
  std::vector<BlockRange> blocks;
  for (int r = 0; r < group.size(); ++r) blocks.push_back(block_range(block.vocab, r, group.size()));
  std::vector<double> lse(static_cast<std::size_t>(n));
  double loss = 0, nll = 0;
  const std::int32_t* t = targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const RowLoss row = combine_row(all, n, i, t[i], blocks, block.vocab, smoothing);
    lse[static_cast<std::size_t>(i)] = row.lse;
    if (t[i] == ignore_index) continue;
    loss += row.loss;
    nll += row.nll;
  }
  if (nll_sum) *nll_sum = nll;
  const Tensor lse_t = Tensor::from_doubles(lse, {n}, stats.dtype()).to(z.device());
  const Tensor value = Tensor::from_doubles({loss}, {}, stats.dtype()).to(z.device());
  const VocabBlock b = block;
  return ag::make_result(value, op, {logits}, [z, targets, lse_t, smoothing, ignore_index, b](const Tensor& g) {
    // d(sum of rows)/d(row loss) = g for every row.
    const Tensor per_row = kernels::full({z.size(0)}, g.to(Device::cpu).item(), lse_t.dtype(), z.device());
    return std::vector<Tensor>{
        kernels::cross_entropy_shard_backward(per_row, z, targets, lse_t, smoothing, ignore_index, b.first, b.vocab)};
  });
}

Tensor gather_vocab_logits(const Tensor& block_logits, Communicator& group) {
  TESSERA_CHECK(block_logits.dim() == 2, "gather_vocab_logits: logits {} must be [rows, block]",
                block_logits.describe());
  // all_gather concatenates dim 0: gather the blocks as columns of the transposed logits.
  const Tensor by_id = group.all_gather(kernels::permute(block_logits, {1, 0}));
  return kernels::permute(by_id, {1, 0});
}

}  // namespace tessera::dist
