#include "train/forced_loss.h"

#include <vector>

#include "autograd/var.h"
#include "data/batching.h"
#include "train/run.h"

namespace tessera::train {

LossSums forced_decoding_loss(const models::Transformer& model, const data::ExampleSet& pairs,
                              std::int64_t batch_tokens, double smoothing, dist::Communicator* replicas) {
  ag::NoGradGuard no_grad;
  data::Batcher batches(&pairs, {.batch_tokens = batch_tokens, .seed = 0, .shuffle = false, .window = 1});
  const int share = replicas != nullptr ? replicas->size() : 1;
  const int mine = replicas != nullptr ? replicas->rank() : 0;
  std::vector<double> rows;  // per batch: smoothed loss, NLL, target tokens (others' rows stay 0)
  data::Batch b;
  models::DropoutStream no_dropout;
  for (std::int64_t i = 0; batches.next(b); ++i) {
    rows.insert(rows.end(), {0.0, 0.0, 0.0});
    if (i % share != mine) continue;
    const LossSums s = run_batch(model, b, smoothing, no_dropout, 0.0);
    double* row = rows.data() + rows.size() - 3;
    row[0] = s.smoothed;
    row[1] = s.nll;
    row[2] = static_cast<double>(s.tokens);
  }
  Tensor per_batch = Tensor::from(rows, {static_cast<std::int64_t>(rows.size() / 3), 3});
  if (share > 1) replicas->all_reduce(per_batch, dist::ReduceOp::sum);
  LossSums sums;
  const double* r = per_batch.data<double>();
  for (std::int64_t i = 0; i < per_batch.size(0); ++i) {
    sums.smoothed += r[3 * i];
    sums.nll += r[3 * i + 1];
    sums.tokens += static_cast<std::int64_t>(r[3 * i + 2]);
  }
  return sums;
}

}  // namespace tessera::train
