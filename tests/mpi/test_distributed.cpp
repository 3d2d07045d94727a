// Run under mpirun -np 4 (CTest does): the MPI collectives against hand-computed results, and
// tensor/data-parallel forward and backward against the single-process model in float64.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "autograd/ops.h"
#include "data/batching.h"
#include "data/example_file.h"
#include "data/synthetic.h"
#include "data/task_data.h"
#include "data/vocab.h"
#include "dist/gradient_reducer.h"
#include "dist/mpi_communicator.h"
#include "dist/parallel_ops.h"
#include "dist/sharding.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "kernels/cpu/blas_core.h"
#include "models/transformer.h"
#include "models/translator.h"
#include "nn/column_parallel_linear.h"
#include "nn/row_parallel_linear.h"
#include "tiny_model.h"

namespace tessera {
namespace {

dist::MpiCommunicator& world() {
  static std::unique_ptr<dist::MpiCommunicator> w = dist::MpiCommunicator::world();
  return *w;
}

Tensor iota(const Shape& shape, double start, double step, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i);
  return Tensor::from_doubles(v, shape, dtype);
}

TEST(MpiCollectives, WorldHasFourRanks) { ASSERT_EQ(world().size(), 4) << "run under mpirun -np 4"; }

TEST(MpiCollectives, AllReduceSumAndAverage) {
  const int r = world().rank(), n = world().size();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor t = iota({7}, r, 1.0, dt);  // rank r holds r, r+1, ..., r+6
    world().all_reduce(t, dist::ReduceOp::sum);
    const double rank_sum = n * (n - 1) / 2.0;
    for (std::int64_t i = 0; i < 7; ++i)
      EXPECT_EQ(t.to_doubles()[static_cast<std::size_t>(i)], rank_sum + n * static_cast<double>(i));
    Tensor a = iota({3}, r, 0.0, dt);
    world().all_reduce(a, dist::ReduceOp::average);
    EXPECT_DOUBLE_EQ(a.to_doubles()[2], rank_sum / n);
  }
  Tensor ints = Tensor::from(std::vector<std::int32_t>{r, 1}, {2});
  world().all_reduce(ints, dist::ReduceOp::sum);
  EXPECT_EQ(ints.data<std::int32_t>()[0], 6);
  EXPECT_EQ(ints.data<std::int32_t>()[1], 4);
}

TEST(MpiCollectives, NonBlockingAllReduce) {
  Tensor t = iota({1000}, world().rank() + 1, 0.0, DType::f32);
  auto req = world().all_reduce_async(t, dist::ReduceOp::average);
  req->wait();
  EXPECT_EQ(t.to_doubles()[999], 2.5);  // (1 + 2 + 3 + 4) / 4
  EXPECT_TRUE(req->test());
}

TEST(MpiCollectives, AllGatherUnevenRows) {
  const int r = world().rank();
  // Rank r contributes r + 1 rows of [r, r] (rank 0: one row, ..., rank 3: four rows).
  Tensor t = Tensor::full({r + 1, 2}, r, DType::f64);
  const Tensor all = world().all_gather(t);
  ASSERT_EQ(all.shape(), (Shape{10, 2}));
  const std::vector<double> expect = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  EXPECT_EQ(all.to_doubles(), expect);
}

TEST(MpiCollectives, ReduceScatterUnevenRows) {
  const int r = world().rank();
  // Every rank holds rows 0..5 valued (row + 10 r); rows split 1, 2, 0, 3.
  Tensor t = Tensor::empty({6, 1}, DType::f32);
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i + 10 * r);
  const std::vector<std::int64_t> rows = {1, 2, 0, 3};
  const Tensor mine = world().reduce_scatter(t, rows, dist::ReduceOp::sum);
  ASSERT_EQ(mine.size(0), rows[static_cast<std::size_t>(r)]);
  std::int64_t first = 0;
  for (int k = 0; k < r; ++k) first += rows[static_cast<std::size_t>(k)];
  for (std::int64_t i = 0; i < mine.size(0); ++i)
    EXPECT_EQ(mine.to_doubles()[static_cast<std::size_t>(i)], 4.0 * static_cast<double>(first + i) + 60.0);
}

// A rank with no rows still takes part, and counts that do not share the rows out are refused
// (before any communication, on every rank alike).
TEST(MpiCollectives, AllGatherWithAnEmptyRankAndBadReduceScatterShares) {
  const int r = world().rank();
  Tensor t = Tensor::full({r == 1 ? 0 : 1, 3}, r, DType::f32);
  const Tensor all = world().all_gather(t);
  ASSERT_EQ(all.shape(), (Shape{3, 3}));
  EXPECT_EQ(all.to_doubles(), (std::vector<double>{0, 0, 0, 2, 2, 2, 3, 3, 3}));
  const Tensor six = Tensor::zeros({6, 2}, DType::f32);
  EXPECT_THROW(world().reduce_scatter(six, {1, 2, 0, 2}, dist::ReduceOp::sum), Error);   // 5 rows of 6
  EXPECT_THROW(world().reduce_scatter(six, {4, 2, -1, 1}, dist::ReduceOp::sum), Error);  // negative
  EXPECT_THROW(world().reduce_scatter(six, {3, 3}, dist::ReduceOp::sum), Error);         // 2 ranks of 4
  EXPECT_EQ(world().reduce_scatter(six, {0, 6, 0, 0}, dist::ReduceOp::sum).size(0), r == 1 ? 6 : 0);
}

// Sequences of any length (empty ones, and a rank with none) arrive whole, in rank order.
TEST(MpiCollectives, AllGatherSequences) {
  const int r = world().rank();
  std::vector<std::vector<std::int32_t>> mine;
  for (int i = 0; i < r; ++i) mine.push_back(std::vector<std::int32_t>(static_cast<std::size_t>(i), 10 * r + i));
  const auto all = dist::all_gather_sequences(world(), mine);  // rank k sends k sequences: lengths 0..k-1
  std::vector<std::vector<std::int32_t>> expect;
  for (int k = 0; k < world().size(); ++k)
    for (int i = 0; i < k; ++i) expect.push_back(std::vector<std::int32_t>(static_cast<std::size_t>(i), 10 * k + i));
  EXPECT_EQ(all, expect);
}

// The corpus file rank 0 writes is mapped by every rank, read-only and shared (MAP_SHARED: one
// copy in the page cache for the ranks of a machine), the same file (inode) on each, with the
// pairs written; only rank 0 checks the ids' checksum, and every rank the index.
TEST(CorpusFile, EveryRankMapsTheOneFileShared) {
  const std::string dir = "/tmp/tessera_mpi_corpus_" + std::to_string(dist::broadcast_u64(::getpid(), &world()));
  const std::string path = dir + "/pairs.bin";
  const data::ExampleSet set = data::make_synthetic(data::SyntheticTask::reverse, 5000, 1, 30, 40, 3);
  if (world().rank() == 0) {
    std::filesystem::create_directories(dir);
    data::write_example_file(path, set, {.key = 9, .empty = 1, .too_long = 2, .extent = {}});
  }
  world().barrier();
  data::ExampleFileInfo info;
  std::string why;
  const std::optional<data::ExampleSet> mapped = data::read_example_file(path, 9, info, why, world().rank() == 0);
  ASSERT_TRUE(mapped.has_value()) << why;
  EXPECT_TRUE(mapped->in_place());
  EXPECT_EQ(*mapped, set);
  EXPECT_EQ(mapped->bytes(), 0);  // no copy of the ids on the heap
  std::ifstream maps("/proc/self/maps");
  std::string line, perms;
  for (std::string l; std::getline(maps, l);)
    if (l.size() >= path.size() && l.compare(l.size() - path.size(), path.size(), path) == 0) line = l;
  ASSERT_FALSE(line.empty()) << "rank " << world().rank() << " has no mapping of " << path;
  std::istringstream(line) >> perms >> perms;  // address range, then the permissions
  EXPECT_EQ(perms, "r--s");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(dist::count_ranks(dist::broadcast_u64(st.st_ino, &world()) != st.st_ino, &world()), 0);
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(MpiCollectives, BroadcastAndSplit) {
  const int r = world().rank();
  Tensor t = Tensor::full({5}, r == 2 ? 42.0 : -1.0, DType::f32);
  world().broadcast(t, 2);
  EXPECT_EQ(t.to_doubles(), std::vector<double>(5, 42.0));
  // Two groups {0, 2} and {1, 3}; the sum inside each.
  auto sub = world().split(r % 2, r);
  EXPECT_EQ(sub->size(), 2);
  EXPECT_EQ(sub->rank(), r / 2);
  Tensor s = Tensor::full({1}, r, DType::f64);
  sub->all_reduce(s, dist::ReduceOp::sum);
  EXPECT_EQ(s.to_doubles()[0], r % 2 == 0 ? 2.0 : 4.0);
  world().barrier();
  EXPECT_EQ(dist::even_split(10, 4), (std::vector<std::int64_t>{3, 3, 2, 2}));
}

// ---- the model: tensor x data parallel == one process, float64

struct Grads {
  double loss = 0;
  std::vector<Tensor> grads;
};

// Loss (per target token of the global batch) and gradients of `model` on `rows` of `batch_indices`.
Grads loss_and_grads(const models::Transformer& model, const data::ExampleSet& examples,
                     const std::vector<std::int64_t>& indices, std::int64_t global_tokens) {
  Grads out;
  for (const ag::Var& p : model.parameters()) ag::Var(p).zero_grad();
  if (!indices.empty()) {
    const data::Batch b = data::make_batch(examples, indices);
    models::DropoutStream no_dropout;
    const std::int64_t rows = b.tgt_out.numel();
    ag::Var logits = ag::reshape(model.forward(b.src, b.src_padding, b.tgt_in, no_dropout), {rows, 24});
    ag::Var loss = ag::cross_entropy(logits, b.tgt_out.reshape({rows}), 0.1, data::kPadId);
    out.loss = loss.value().item() / static_cast<double>(global_tokens);
    ag::scale(loss, 1.0 / static_cast<double>(global_tokens)).backward();
  }
  return out;
}

// `sentences` in the batch (fewer than data-parallel ranks: some ranks have none and skip
// backward, as the trainer does).
void expect_parallel_equals_single(int tp, std::int64_t sentences = 10, bool pre_norm = false) {
  const int dp = world().size() / tp, r = world().rank();
  auto tensor_group = world().split(r / tp, r);
  auto data_group = world().split(r % tp, r);
  const auto examples = data::make_synthetic(data::SyntheticTask::reverse, sentences, 3, 9, 20, 5);
  std::vector<std::int64_t> all(static_cast<std::size_t>(sentences));
  for (std::int64_t i = 0; i < sentences; ++i) all[static_cast<std::size_t>(i)] = i;
  const std::int64_t tokens = data::make_batch(examples, all).tgt_tokens;
  models::TransformerConfig config = tiny_config();
  config.pre_norm = pre_norm;

  // The reference: one process, the whole batch.
  const models::Transformer single(config, 3);
  const Grads ref = loss_and_grads(single, examples, all, tokens);

  // This rank: its heads and d_ff units, its share of the rows.
  const models::Transformer model(config, 3, tensor_group.get());
  const std::vector<std::int64_t> rows = dist::even_split(sentences, dp);
  std::int64_t start = 0;
  for (int k = 0; k < data_group->rank(); ++k) start += rows[static_cast<std::size_t>(k)];
  const std::vector<std::int64_t> mine(all.begin() + start,
                                       all.begin() + start + rows[static_cast<std::size_t>(data_group->rank())]);
  dist::GradientReducer reducer(model.parameters(), *data_group, 4096);  // several buckets
  reducer.arm();
  Grads got = loss_and_grads(model, examples, mine, tokens);
  reducer.finish();
  Tensor loss = Tensor::full({1}, got.loss, DType::f64);
  data_group->all_reduce(loss, dist::ReduceOp::sum);
  EXPECT_NEAR(loss.to_doubles()[0], ref.loss, 1e-10 * std::abs(ref.loss));

  // Relative to each tensor's largest entry; gradients that are zero in exact arithmetic (the
  // key projection's bias: softmax ignores a constant added to every score) against the model's
  // (rounding leaves ~1e-16 of it there).
  double model_scale = 0;
  for (const ag::Var& p : single.parameters())
    for (double g : p.grad().to_doubles()) model_scale = std::max(model_scale, std::abs(g));
  const auto& params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ag::Var& p = params[i];
    const Tensor expect =
        dist::take_block(single.parameter(p.name()).grad(), model.shard_dim(i), tensor_group->rank(), tp);
    ASSERT_TRUE(p.grad().defined()) << p.name();
    ASSERT_EQ(p.grad().shape(), expect.shape()) << p.name();
    const std::vector<double> a = p.grad().to_doubles(), e = expect.to_doubles();
    double scale = 0, err = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      scale = std::max(scale, std::abs(e[k]));
      err = std::max(err, std::abs(a[k] - e[k]));
    }
    EXPECT_LE(err, 1e-10 * std::max(scale, 1e-4 * model_scale)) << p.name() << " on rank " << r << " (tp " << tp << ")";
  }
}

TEST(TensorDataParallel, DataParallelFourEqualsOneProcess) { expect_parallel_equals_single(1); }
TEST(TensorDataParallel, TensorParallelTwoTimesDataTwoEqualsOneProcess) { expect_parallel_equals_single(2); }
// A rank without sentences starts every bucket at the end; the others start them as backward
// finishes them, which for pre-norm (its final layer norms come last in the parameter list but
// early in backward) is not the buckets' order: they must still be started in one order.
TEST(TensorDataParallel, RanksWithoutSentencesEqualOneProcessPreNorm) {
  expect_parallel_equals_single(1, 2, /*pre_norm=*/true);
}
TEST(TensorDataParallel, TensorParallelFourEqualsOneProcess) { expect_parallel_equals_single(4); }

TEST(TensorDataParallel, HeadsMustDivideOverTensorParallelRanks) {
  models::TransformerConfig c = tiny_config();
  c.heads = 2;
  try {
    models::Transformer m(c, 1, &world());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "model: heads 2 do not divide over 4 tensor-parallel ranks (model.heads, parallel.tensor)");
  }
}

// train.recompute: layer at tp=2 x dp=2, float32 with dropout: backward runs each layer's forward
// again, its tensor-parallel all-reduces included, and the data-parallel buckets start from the
// hooks of gradients that appear during that recompute. Losses and gradients must equal
// recompute: none's bit for bit.
struct StepResult {
  double loss = 0;
  std::vector<Tensor> grads;
};

StepResult step_with_dropout(bool pre_norm, bool recompute, dist::Communicator& tensor_group,
                             dist::Communicator& data_group) {
  models::TransformerConfig config = tiny_config();
  config.dtype = DType::f32;
  config.dropout = 0.2;
  config.pre_norm = pre_norm;
  config.recompute_layers = recompute;
  const models::Transformer model(config, 3, &tensor_group);
  const auto examples = data::make_synthetic(data::SyntheticTask::reverse, 8, 3, 9, 20, 5);
  const std::vector<std::int64_t> mine =
      data_group.rank() == 0 ? std::vector<std::int64_t>{0, 1, 2, 3} : std::vector<std::int64_t>{4, 5, 6, 7};
  const data::Batch b = data::make_batch(examples, mine);
  dist::GradientReducer reducer(model.parameters(), data_group, 4096);  // several buckets
  reducer.arm();
  models::DropoutStream drop = models::DropoutStream::for_step(11, data_group.rank(), 2);
  const std::int64_t rows = b.tgt_out.numel();
  ag::Var logits = ag::reshape(model.forward(b.src, b.src_padding, b.tgt_in, drop), {rows, 24});
  const ag::Var loss = ag::cross_entropy(logits, b.tgt_out.reshape({rows}), 0.1, data::kPadId);
  ag::scale(loss, 0.01).backward();
  reducer.finish();
  StepResult r{.loss = loss.value().item(), .grads = {}};
  for (const ag::Var& p : model.parameters()) r.grads.push_back(p.grad());
  return r;
}

TEST(TensorDataParallel, RecomputedLayersGiveTheSameGradientsBitForBit) {
  const int r = world().rank();
  auto tensor_group = world().split(r / 2, r);
  auto data_group = world().split(r % 2, r);
  for (const bool pre_norm : {false, true}) {
    const StepResult none = step_with_dropout(pre_norm, false, *tensor_group, *data_group);
    const StepResult layer = step_with_dropout(pre_norm, true, *tensor_group, *data_group);
    EXPECT_EQ(layer.loss, none.loss) << "rank " << r << ", pre_norm " << pre_norm;
    ASSERT_EQ(layer.grads.size(), none.grads.size());
    for (std::size_t i = 0; i < none.grads.size(); ++i) {
      ASSERT_TRUE(layer.grads[i].defined() && none.grads[i].defined());
      EXPECT_EQ(layer.grads[i].to_doubles(), none.grads[i].to_doubles())
          << "parameter " << i << " on rank " << r << ", pre_norm " << pre_norm;
    }
  }
}

// ---------------------------------------------------------------- data
void expect_same_examples(const data::ExampleSet& a, const data::ExampleSet& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].src, b[i].src) << what << " pair " << i;
    ASSERT_EQ(a[i].tgt, b[i].tgt) << what << " pair " << i;
  }
  EXPECT_TRUE(a == b) << what;
}

// The corpus is encoded in shares over the ranks and exchanged: the same pairs in the same order
// as one process encoding alone, for rounds of any size (uneven shares, a round smaller than the
// ranks, rounds ending mid-corpus).
TEST(DistributedData, EncodingSharedOverRanksEqualsOneProcess) {
  Tensor pid = Tensor::from(std::vector<std::int32_t>{static_cast<std::int32_t>(getpid())}, {1});
  world().broadcast(pid, 0);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera_mpi_data_" + std::to_string(pid.data<std::int32_t>()[0]));
  const std::string corpus = std::string(TESSERA_TEST_DATA_DIR) + "/corpus/multi30k_300";
  const std::string yaml = "data:\n  train_src: " + corpus + ".en\n  train_tgt: " + corpus +
                           ".de\n  valid_src: " + corpus + ".en\n  valid_tgt: " + corpus +
                           ".de\n  vocab_size: 500\n  max_len: 24\n" + "output:\n  dir: " + dir.string() + "\n";
  const io::RunConfig cfg = io::RunConfig::parse(yaml, "test.yaml", {});
  const data::TaskData shared = data::load_task_data(cfg, &world());  // rank 0 trains the vocabulary
  const data::TaskData alone = data::load_task_data(cfg);             // then loaded from output.dir
  expect_same_examples(shared.train, alone.train, "train");
  expect_same_examples(shared.valid, alone.valid, "valid");
  EXPECT_EQ(shared.valid_refs, alone.valid_refs);

  data::ParallelText text = data::read_parallel(corpus + ".en", corpus + ".de");
  text.tgt[5].clear();  // an empty pair
  text.src[7] = "   ";  // spaces alone: no tokens, so empty too
  const data::EncodedPairs one = data::encode_pairs(alone.src_codec, alone.tgt_codec, text, 24);
  EXPECT_EQ(one.empty, 2);
  EXPECT_GT(one.too_long, 10) << one.examples.size();
  EXPECT_GT(one.examples.size(), 100);
  EXPECT_EQ(static_cast<std::int64_t>(one.kept_lines.size()), one.examples.size());
  for (std::int64_t round : {1, 3, 37, 299, 300, 1000, 0}) {
    const data::EncodedPairs many = data::encode_pairs(shared.src_codec, shared.tgt_codec, text, 24, &world(), round);
    const std::string what = "rounds of " + std::to_string(round);
    expect_same_examples(many.examples, one.examples, what);
    EXPECT_EQ(many.kept_lines, one.kept_lines) << what;
    EXPECT_EQ(many.empty, one.empty) << what;
    EXPECT_EQ(many.too_long, one.too_long) << what;
  }
  // Streamed from the files a round at a time, shared over the ranks or by one alone: the same.
  const std::string src = (dir / "text.en").string(), tgt = (dir / "text.de").string();
  if (world().rank() == 0) {
    std::ofstream s(src), t(tgt);
    for (std::size_t i = 0; i < text.src.size(); ++i) {
      s << text.src[i] << '\n';
      t << text.tgt[i] << '\n';
    }
  }
  world().barrier();
  for (std::int64_t round : {1, 37, 300, 0}) {
    const std::string what = "streamed in rounds of " + std::to_string(round);
    const data::EncodedPairs streamed =
        data::encode_files(shared.src_codec, shared.tgt_codec, src, tgt, 24, &world(), round);
    expect_same_examples(streamed.examples, one.examples, what);
    EXPECT_EQ(streamed.kept_lines, one.kept_lines) << what;
    EXPECT_EQ(streamed.empty, one.empty) << what;
    EXPECT_EQ(streamed.too_long, one.too_long) << what;
  }
  const data::EncodedPairs streamed_alone = data::encode_files(alone.src_codec, alone.tgt_codec, src, tgt, 24);
  expect_same_examples(streamed_alone.examples, one.examples, "streamed by one process");
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove_all(dir);
}

// Validation decoding shared by the data-parallel replicas: each translates its share of the
// batches (models::batch_owners) and the translations are gathered; every rank gets exactly what its model translates
// alone (dp = 4; and tp = 2 x dp = 2, against the same tensor-parallel group translating all).
TEST(DistributedData, TranslationSharedOverReplicasEqualsOneReplicaAndStopsTogether) {
  models::TransformerConfig c = tiny_config();
  c.dtype = DType::f32;  // decoding scores in float32
  std::vector<std::vector<std::int32_t>> sources;
  for (const data::Example& e : data::make_synthetic(data::SyntheticTask::reverse, 13, 1, 9, 20, 7).to_vector())
    sources.push_back(e.src);
  models::DecodeOptions opt;
  opt.beam = 2;
  opt.max_extra_len = 4;
  for (int tp : {1, 2}) {
    const int r = world().rank();
    auto tensor_group = world().split(r / tp, r);
    auto data_group = world().split(r % tp, r);
    const models::Transformer model(c, 3, tp > 1 ? tensor_group.get() : nullptr);
    const models::TokenRows alone = models::translate_ids(model, sources, opt, 2).value();
    const models::TokenRows shared = models::translate_ids(model, sources, opt, 2, data_group.get()).value();
    ASSERT_EQ(shared.size(), sources.size());
    // A stop asked for on the last rank only stops every rank (as a SIGTERM does a validation);
    // not asked for, the interrupt changes nothing.
    const models::DecodeInterrupt last_rank_stops{&world(), [&] { return r == world().size() - 1; }};
    const models::DecodeInterrupt nobody_stops{&world(), [] { return false; }};
    EXPECT_FALSE(models::translate_ids(model, sources, opt, 2, data_group.get(), &last_rank_stops).has_value());
    EXPECT_EQ(models::translate_ids(model, sources, opt, 2, data_group.get(), &nobody_stops).value(), shared);
    for (std::size_t i = 0; i < sources.size(); ++i) EXPECT_EQ(shared[i], alone[i]) << "tp " << tp << " sentence " << i;
    std::size_t tokens = 0;
    for (const auto& h : shared) tokens += h.size();
    EXPECT_GT(tokens, 0u) << "tp " << tp;
  }
}

// The two tensor-parallel ops checked alone, with float64 central differences: a column- then
// row-parallel pair over 4 ranks, L = sum(R * g(tanh(f(x) W1_r^T) W2_r^T)). x is perturbed alike on
// every rank; a weight shard's entry only on the rank that holds it (every rank computes L).
TEST(TensorParallelOps, GradientsMatchCentralDifferences) {
  const int rank = world().rank(), n = world().size();
  const auto uniform = [](const Shape& shape, std::uint64_t seed) {  // the same on every rank
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
    for (double& e : v) e = u(rng);
    return Tensor::from_doubles(v, shape, DType::f64);
  };
  const std::int64_t rows = 3, in = 5, hidden_per_rank = 2, out = 3;
  const Tensor w1_full = uniform({hidden_per_rank * n, in}, 1), w2_full = uniform({out, hidden_per_rank * n}, 2);
  const Tensor r = uniform({rows, out}, 3);
  ag::Var x = ag::Var::parameter(uniform({rows, in}, 4), "x");
  // Rank r's shards: rows [2r, 2r + 2) of W1 (column-parallel), the same columns of W2 (row-parallel).
  ag::Var w1 = ag::Var::parameter(w1_full.narrow_rows(rank * hidden_per_rank, hidden_per_rank).clone(), "w1");
  Tensor w2_shard = Tensor::empty({out, hidden_per_rank}, DType::f64);
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t j = 0; j < hidden_per_rank; ++j)
      w2_shard.data<double>()[i * hidden_per_rank + j] =
          w2_full.data<double>()[i * hidden_per_rank * n + rank * hidden_per_rank + j];
  ag::Var w2 = ag::Var::parameter(w2_shard, "w2");
  const auto loss = [&] {
    const ag::Var h = ag::tanh(ag::matmul(dist::copy_to_tensor_parallel(x, world()), w1, false, true));
    const ag::Var y = dist::reduce_from_tensor_parallel(ag::matmul(h, w2, false, true), world());
    return ag::sum(ag::mul(y, ag::Var(r)));
  };
  loss().backward();
  constexpr double h = 1e-6;
  const auto central = [&](double& entry, bool mine) {  // collective: every rank evaluates L
    ag::NoGradGuard no_grad;
    const double saved = entry;
    if (mine) entry = saved + h;
    const double up = loss().value().item();
    if (mine) entry = saved - h;
    const double down = loss().value().item();
    entry = saved;
    return (up - down) / (2 * h);
  };
  const std::vector<double> dx = x.grad().to_doubles();
  for (std::int64_t j = 0; j < x.value().numel(); ++j)
    EXPECT_NEAR(dx[static_cast<std::size_t>(j)], central(x.value().data<double>()[j], true), 1e-8) << "x " << j;
  for (const auto& [name, w] : {std::pair{"w1", &w1}, std::pair{"w2", &w2}}) {
    const std::vector<double> analytic = w->grad().to_doubles();
    for (int owner = 0; owner < n; ++owner) {
      for (std::int64_t j = 0; j < w->value().numel(); ++j) {
        const double numeric = central(w->value().data<double>()[j], owner == rank);
        if (owner == rank) {
          EXPECT_NEAR(analytic[static_cast<std::size_t>(j)], numeric, 1e-8) << name << " rank " << rank << " " << j;
        }
      }
    }
  }
}

// The nn layers' tensor-parallel pair: ColumnParallelLinear -> ReLU -> RowParallelLinear over a
// group of 2 ranks equals the Linear pair of one process (the same seeds), forward and every
// gradient (each shard's against its block of the full one); a gathered column-parallel output
// equals the whole Linear's.
TEST(TensorParallelLayers, ColumnThenRowParallelEqualsOneLinearPair) {
  const int r = world().rank();
  auto group = world().split(r / 2, r);
  ASSERT_EQ(group->size(), 2);
  const nn::Placement one{.dtype = DType::f64, .device = Device::cpu, .compute = DType::f64};
  nn::Placement two = one;
  two.tensor_parallel = group.get();
  const auto uniform = [](const Shape& shape, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
    for (double& e : v) e = u(rng);
    return Tensor::from_doubles(v, shape, DType::f64);
  };
  const nn::Linear fc1("fc1", 5, 6, 1, one), fc2("fc2", 6, 3, 2, one);
  const nn::ColumnParallelLinear col("fc1", 5, 6, 1, two);
  const nn::RowParallelLinear row("fc2", 6, 3, 2, two);
  const nn::ColumnParallelLinear gathered("fc1", 5, 6, 1, two, /*gather_output=*/true);
  for (const auto& [layer, biases] : {std::pair{&fc1, 1}, std::pair{&fc2, 2}})  // biases that are not zero
    ag::Var(layer->bias()).value() = uniform(layer->bias().shape(), 10 + static_cast<std::uint64_t>(biases));
  const auto blocks_of_biases = [&](const std::vector<nn::Parameter>& params, const nn::Linear& full) {
    ag::Var(params[1].var).value() = dist::take_block(full.bias().value(), params[1].shard, group->rank(), 2);
  };
  blocks_of_biases(col.parameters(), fc1);
  blocks_of_biases(row.parameters(), fc2);
  blocks_of_biases(gathered.parameters(), fc1);

  const Tensor x = uniform({2, 4, 5}, 3), weights = uniform({2, 4, 3}, 4);
  const auto loss_of = [&](const ag::Var& y) { return ag::sum(ag::mul(y, ag::Var(weights))); };
  ag::Var x_one = ag::Var::parameter(x.clone(), "x"), x_two = ag::Var::parameter(x.clone(), "x");
  const ag::Var y_one = fc2(ag::relu(fc1(x_one))), y_two = row(ag::relu(col(x_two)));
  loss_of(y_one).backward();
  loss_of(y_two).backward();
  const auto expect_close = [](const Tensor& got, const Tensor& expect, const std::string& what) {
    ASSERT_EQ(got.shape(), expect.shape()) << what;
    const std::vector<double> g = got.to_doubles(), e = expect.to_doubles();
    for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-13) << what << " element " << i;
  };
  expect_close(y_two.value(), y_one.value(), "output");
  expect_close(x_two.grad(), x_one.grad(), "input gradient");
  std::vector<nn::Parameter> full = fc1.parameters(), shards = col.parameters();
  nn::append(full, fc2.parameters());
  nn::append(shards, row.parameters());
  const std::vector<dist::ShardDim> expect_shards = {dist::ShardDim::rows, dist::ShardDim::rows,
                                                     dist::ShardDim::columns, dist::ShardDim::replicated};
  for (std::size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(shards[i].var.name(), full[i].var.name());
    EXPECT_EQ(shards[i].shard, expect_shards[i]) << full[i].var.name();
    expect_close(shards[i].var.value(), dist::take_block(full[i].var.value(), shards[i].shard, group->rank(), 2),
                 full[i].var.name());
    expect_close(shards[i].var.grad(), dist::take_block(full[i].var.grad(), shards[i].shard, group->rank(), 2),
                 full[i].var.name() + " gradient");
  }

  for (const nn::Parameter& p : fc1.parameters()) ag::Var(p.var).zero_grad();
  const Tensor w6 = uniform({2, 4, 6}, 5);
  const ag::Var g_one = fc1(ag::Var(x)), g_two = gathered(ag::Var(x));
  ag::sum(ag::mul(g_one, ag::Var(w6))).backward();
  ag::sum(ag::mul(g_two, ag::Var(w6))).backward();
  expect_close(g_two.value(), g_one.value(), "gathered output");
  for (std::size_t i = 0; i < 2; ++i)
    expect_close(gathered.parameters()[i].var.grad(),
                 dist::take_block(fc1.parameters()[i].var.grad(), dist::ShardDim::rows, group->rank(), 2),
                 "gathered " + fc1.parameters()[i].var.name() + " gradient");
}

// The tensor-parallel loader names what is wrong as the single-process one does: a NaN in a
// replicated tensor (every rank reads it whole: no "block k of n"), a dataset of integers.
TEST(ShardedCheckpoint, ReplicatedNaNAndIntegerDatasetsAreNamed) {
  const auto pid = dist::broadcast_u64(static_cast<std::uint64_t>(::getpid()), &world());
  const std::string file =
      (std::filesystem::temp_directory_path() / fmt::format("tessera_sharded_{}.h5", pid)).string();
  const std::map<std::string, dist::ShardDim> shards = {{"w", dist::ShardDim::rows}};
  const auto load_error = [&] {
    try {
      (void)io::load_checkpoint_sharded(file, shards, world(), true);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  io::Checkpoint c;
  c.step = 1;
  c.config_yaml = "model:\n  layers: 1\n";
  c.model = {{"w", iota({8, 2}, 0, 1, DType::f32)}, {"b", iota({3}, 0, 1, DType::f32)}};
  c.model.at("b").data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  if (world().rank() == 0) io::save_checkpoint(file, c);
  world().barrier();
  EXPECT_EQ(load_error(),
            fmt::format("checkpoint '{}': dataset '/model/b' holds a non-finite value (nan) at element 1", file));
  world().barrier();
  if (world().rank() == 0) {
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Ldelete(f, "/model/b", H5P_DEFAULT);
    const hsize_t n = 3;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    H5Dclose(H5Dcreate2(f, "/model/b", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Sclose(space);
    H5Fclose(f);
  }
  world().barrier();
  EXPECT_NE(load_error().find("dataset '/model/b' is not floating point"), std::string::npos) << load_error();
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove(file);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  // As `tessera` does: OpenBLAS's kernels for this CPU, not its fallback for a CPU it does not know.
  tessera::cpu::rerun_with_faster_blas_core(argv);
  ::testing::InitGoogleTest(&argc, argv);
  tessera::dist::ensure_mpi_initialized();
  // Only rank 0 reports; the others' failures still fail the job through the exit status.
  if (tessera::world().rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}
