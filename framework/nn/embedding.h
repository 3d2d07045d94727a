// Token embeddings, scaled by sqrt(d_model) as in Vaswani et al. (2017), section 3.4.
#pragma once

#include <string>
#include <vector>

#include "dist/vocab_parallel.h"
#include "nn/parameter.h"

namespace tessera::nn {

class Embedding {
 public:
  Embedding() = default;
  // Parameter `name`.weight [vocab, d_model] ~ N(0, d_model^-1/2) from `seed`, replicated; with
  // `vocab_parallel` under tensor parallelism, this rank keeps its block of rows (dist::vocab_block).
  Embedding(const std::string& name, std::int64_t vocab, std::int64_t d_model, std::uint64_t seed,
            const Placement& placement, bool vocab_parallel = false);

  // int32 ids [...] -> sqrt(d_model) * rows [..., d_model] in the compute dtype (the rows are taken
  // from the table in its own dtype, so that its gradient stays there). Vocabulary-parallel: each
  // rank looks up the ids of its rows and the group sums them.
  ag::Var operator()(const Tensor& ids) const;

  // The table [vocab, d_model] (the pre-softmax weights when tied), or this rank's block of rows.
  const ag::Var& weight() const { return weight_.var; }
  std::vector<Parameter> parameters() const { return {weight_}; }
  // The group the rows split over (null: the whole table here) and this rank's rows.
  dist::Communicator* vocab_group() const { return group_; }
  const dist::VocabBlock& block() const { return block_; }

 private:
  Parameter weight_;
  std::int64_t d_model_ = 0;
  DType compute_ = DType::f32;
  dist::Communicator* group_ = nullptr;
  dist::VocabBlock block_;
};

}  // namespace tessera::nn
