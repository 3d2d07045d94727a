#include "io/run_config.h"

#include <fmt/core.h>

#include <cmath>
#include <stdexcept>
#include <utility>

namespace tessera::io {
namespace {

// Every key of the config, defined once: its field, default, range and description. Two visitors
// walk it: SchemaBuilder makes the schema that checks a YAML file, FieldReader fills the structs.
template <typename Keys>
void define_keys(Keys& k, RunConfig& c) {
  k.integer("model.layers", c.model.layers, 6, 1, 64, "encoder and decoder layers (N)");
  k.integer("model.d_model", c.model.d_model, 512, 8, 16384, "model width (d_model)");
  k.integer("model.d_ff", c.model.d_ff, 2048, 8, 65536, "inner width of the position-wise feed-forward network (d_ff)");
  k.integer("model.heads", c.model.heads, 8, 1, 256, "attention heads (h); d_model must divide by it");
  k.real("model.dropout", c.model.dropout, 0.1, 0.0, 0.9,
         "dropout on sub-layer outputs and embedding + position sums (P_drop)");
  k.choice("model.norm", c.model.norm, "post", {{"post", Norm::post}, {"pre", Norm::pre}},
           "layer norm after each residual sum (paper) or inside the branch");
  k.boolean("model.share_embeddings", c.model.share_embeddings, true,
            "one embedding for source and target (needs a joint vocabulary)");
  k.boolean("model.tie_output", c.model.tie_output, true, "pre-softmax weights = target embedding");
  k.integer("model.max_positions", c.model.max_positions, 1024, 16, 65536,
            "longest sequence the positional table covers");
  // ---- data
  k.choice("data.task", c.data.task, "translation",
           {{"translation", Task::translation}, {"copy", Task::copy}, {"reverse", Task::reverse}, {"sort", Task::sort}},
           "parallel text, or a built-in synthetic task that needs no files");
  k.string("data.train_src", c.data.train_src, "", {},
           "training source text, one sentence a line (.gz allowed; a file, not a pipe: it is read more than once)");
  k.string("data.train_tgt", c.data.train_tgt, "", {}, "training target text, line-aligned with train_src");
  k.string("data.valid_src", c.data.valid_src, "", {}, "validation source text");
  k.string("data.valid_tgt", c.data.valid_tgt, "", {}, "validation target text (the BLEU reference)");
  k.boolean("data.joint_vocab", c.data.joint_vocab, true,
            "one vocabulary for both languages (false: one per language; needs model.share_embeddings false)");
  k.string("data.vocab", c.data.vocab, "", {},
           "SentencePiece model (the source side's when not joint); empty: train one into output.dir on first use");
  k.string("data.vocab_tgt", c.data.vocab_tgt, "", {},
           "target-side SentencePiece model when data.joint_vocab is false; empty: train one into output.dir");
  k.integer("data.vocab_size", c.data.vocab_size, 8000, 16, 1000000,
            "size of each SentencePiece vocabulary trained on first use");
  k.string("data.vocab_type", c.data.vocab_type, "bpe", {"bpe", "unigram"},
           "SentencePiece model type for a trained vocabulary");
  k.integer("data.max_len", c.data.max_len, 128, 1, 65536,
            "pairs longer than this (subword tokens) are skipped and counted; below model.max_positions");
  k.boolean("data.cache", c.data.cache, true,
            "keep the encoded training pairs in one file every rank maps (shared in the page cache); a later "
            "start with the same text, vocabularies and max_len maps it instead of encoding again. false: each "
            "rank holds them in memory");
  k.string("data.cache_dir", c.data.cache_dir, "", {},
           "folder for those files (encoded_train_<hash>.bin); empty: output.dir. Runs with the same data.vocab "
           "may share one");
  k.integer("data.synthetic_vocab", c.data.synthetic_vocab, 20, 2, 100000,
            "synthetic tasks: number of distinct symbols");
  k.integer("data.synthetic_min_len", c.data.synthetic_min_len, 10, 1, 10000, "synthetic tasks: shortest sequence");
  k.integer("data.synthetic_max_len", c.data.synthetic_max_len, 20, 1, 10000,
            "synthetic tasks: longest sequence; below model.max_positions");
  k.integer("data.synthetic_train_size", c.data.synthetic_train_size, 50000, 1, 100000000,
            "synthetic tasks: training examples");
  k.integer("data.synthetic_valid_size", c.data.synthetic_valid_size, 500, 1, 1000000,
            "synthetic tasks: validation examples");
  // ---- training
  k.integer("train.batch_tokens", c.train.batch_tokens, 4096, 1, 10000000,
            "tokens per batch, padding included (rows x longest side)");
  k.integer("train.accumulate", c.train.accumulate, 1, 1, 1024, "batches whose gradients are summed into one update");
  k.integer("train.max_steps", c.train.max_steps, 100000, 1, 1000000000, "stop after this many updates");
  k.integer("train.max_epochs", c.train.max_epochs, 0, 0, 1000000, "stop after this many epochs (0: no limit)");
  k.real("train.max_minutes", c.train.max_minutes, 0.0, 0.0, 1e7, "stop after this much wall time (0: no limit)");
  k.boolean("train.fit_steps_to_time", c.train.fit_steps_to_time, false,
            "measure the speed of the first steps (up to train.warmup, at least 20) and lower train.max_steps to the "
            "steps that fit in train.max_minutes, so a linear schedule decays to 0 as the time runs out; saved in "
            "checkpoints (a resume keeps it)");
  k.real("train.lr_factor", c.train.lr_factor, 1.0, 0.0, 1000.0,
         "lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)");
  k.real("train.lr_peak", c.train.lr_peak, 0.0, 0.0, 10.0,
         "the learning rate at the end of warmup, the schedule's peak (fairseq's --lr): when set, it replaces "
         "train.lr_factor by lr_peak * (d_model * warmup)^0.5 (0: off)");
  k.integer("train.warmup", c.train.warmup, 4000, 1, 100000000, "warmup steps of the learning-rate schedule");
  k.choice("train.lr_schedule", c.train.lr_schedule, "inverse_sqrt",
           {{"inverse_sqrt", LrSchedule::inverse_sqrt}, {"linear", LrSchedule::linear}},
           "after warmup: the paper's step^-0.5, or linear decay to 0 at train.max_steps");
  k.real("train.adam_beta1", c.train.adam_beta1, 0.9, 0.0, 0.999999, "Adam beta1");
  k.real("train.adam_beta2", c.train.adam_beta2, 0.98, 0.0, 0.999999, "Adam beta2");
  k.real("train.adam_eps", c.train.adam_eps, 1e-9, 0.0, 1.0,
         "Adam epsilon (above 0 to train: a weight whose gradients have all been 0 would get 0 / 0)");
  k.real("train.label_smoothing", c.train.label_smoothing, 0.1, 0.0, 0.99, "label smoothing (epsilon_ls)");
  k.real("train.clip_norm", c.train.clip_norm, 0.0, 0.0, 1e6, "clip the global gradient norm to this (0: off)");
  k.integer("train.seed", c.train.seed, 1, 0, 4294967295,
            "seed of initialization, data order, dropout and a synthetic task's examples (its validation set too)");
  k.integer("train.log_every", c.train.log_every, 100, 1, 100000000, "steps between log lines");
  k.integer("train.valid_every", c.train.valid_every, 1000, 0, 100000000,
            "steps between validations (0: only at the end)");
  k.integer("train.valid_max_sentences", c.train.valid_max_sentences, 0, 0, 100000000,
            "validate BLEU on at most this many sentences (0: all)");
  k.integer("train.patience", c.train.patience, 0, 0, 1000000,
            "stop early when this many validations in a row have not beaten the best train.best_metric score so "
            "far (0: never)");
  k.choice("train.best_metric", c.train.best_metric, "bleu",
           {{"bleu", BestMetric::bleu}, {"chrf", BestMetric::chrf}, {"ppl", BestMetric::ppl}},
           "the validation score that picks checkpoint_best.h5 and counts train.patience: BLEU (exact match for "
           "synthetic tasks), chrF2, or perplexity (lower is better)");
  k.choice("train.device", c.train.device, "cpu", {{"cpu", Device::cpu}, {"cuda", Device::cuda}},
           "where the model trains: cpu, or cuda (one GPU per process, chosen by its rank on the machine)");
  k.choice("train.precision", c.train.precision, "fp32", {{"fp32", Precision::fp32}, {"bf16", Precision::bf16}},
           "bf16 on a GPU: bfloat16 copies of the weights and bfloat16 activations in compute; on a CPU with AMX or "
           "AVX512-BF16: float32 activations, the GEMMs of the linear layers and the output projection on "
           "bfloat16-rounded operands (oneDNN). Float32 master weights, optimizer and loss either way");
  k.boolean("train.tf32", c.train.tf32, false,
            "float32 GEMMs and attention (head dims 64, 128) on the GPU's TF32 tensor cores (faster, ~10 "
            "mantissa bits)");
  k.choice("train.recompute", c.train.recompute, "none", {{"none", Recompute::none}, {"layer", Recompute::layer}},
           "layer: keep only each encoder and decoder layer's inputs and run the layer again in backward, with "
           "the same dropout masks (less memory, about a third more compute, the same gradients bit for bit)");
  k.boolean("train.memory_check", c.train.memory_check, true,
            "before any data work, compare the predicted peak memory per rank (as `tessera plan` computes it) with "
            "what the rank can use, and stop with settings that fit when it is over (false: skip)");
  // ---- decoding
  k.integer("decode.beam", c.decode.beam, 4, 1, 1000, "beam size (1: greedy)");
  k.real("decode.length_penalty", c.decode.length_penalty, 0.6, 0.0, 10.0,
         "alpha of the length penalty ((5 + len) / 6)^alpha");
  k.integer("decode.max_extra_len", c.decode.max_extra_len, 50, 0, 100000,
            "a translation may have at most as many tokens as its source, eos included (as fairseq counts "
            "it), + this many (and model.max_positions)");
  k.integer("decode.batch_sentences", c.decode.batch_sentences, 64, 1, 100000, "sentences decoded together");
  // ---- parallelism (mpirun -np tensor*data)
  k.integer("parallel.tensor", c.parallel.tensor, 1, 1, 4096,
            "tensor-parallel ranks: attention heads and d_ff split over them (adjacent ranks: keep a group on "
            "one machine)");
  k.integer("parallel.data", c.parallel.data, 1, 1, 1000000,
            "data-parallel replicas; parallel.tensor x parallel.data must equal the number of processes");
  k.real("parallel.bucket_mb", c.parallel.bucket_mb, 25.0, 0.001, 65536.0,
         "MiB of gradients per all-reduce bucket (started as soon as backward finishes the bucket)");
  k.boolean("parallel.overlap", c.parallel.overlap, true,
            "start each bucket's all-reduce during backward (false: all after backward, to measure overlap)");
  k.real("parallel.timeout_s", c.parallel.timeout_s, 300.0, 0.0, 1e7,
         "a rank waiting longer than this in one collective (a peer died or hangs) exits, ending the job "
         "(0: wait forever; not while rank 0 reads the corpus and trains the vocabulary at the start; a "
         "tensor-parallel checkpoint save or load counts as one wait: keep it above a save's time)");
  k.boolean("parallel.measure_comm", c.parallel.measure_comm, false,
            "a barrier after backward, so the logged all-reduce wait excludes load imbalance (benchmarks)");
  k.integer("parallel.zero", c.parallel.zero, 0, 0, 1,
            "1: shard Adam's moments over the data-parallel ranks (ZeRO stage 1); 0: every rank holds them all");
  k.boolean("parallel.vocab_parallel", c.parallel.vocab_parallel, false,
            "split the embedding, the output layer and the logits by vocabulary rows over the tensor-parallel "
            "ranks (no effect at parallel.tensor 1)");
  // ---- checkpoints
  k.integer("checkpoint.every", c.checkpoint.every, 1000, 0, 100000000,
            "steps between checkpoints (0: only at the end, on a signal and at a new best)");
  k.integer("checkpoint.keep_last", c.checkpoint.keep_last, 5, 0, 1000000,
            "step checkpoints kept; older ones are deleted (0: keep all)");
  k.boolean("checkpoint.keep_best", c.checkpoint.keep_best, true,
            "also keep checkpoint_best.h5: the best validation score (train.best_metric) so far");
  // ---- output
  k.string("output.dir", c.output.dir, "checkpoints/run", {},
           "folder for the checkpoint, config, vocabulary and metrics");
}

// Builds the schema from the table (the field references are not touched).
class SchemaBuilder {
 public:
  template <typename Int>
  void integer(const char* key, Int&, std::int64_t def, std::int64_t min, std::int64_t max, const char* doc) {
    schema.integer(key, def, min, max, doc);
  }
  void real(const char* key, double&, double def, double min, double max, const char* doc) {
    schema.real(key, def, min, max, doc);
  }
  void boolean(const char* key, bool&, bool def, const char* doc) { schema.boolean(key, def, doc); }
  void string(const char* key, std::string&, const char* def, std::vector<std::string> choices, const char* doc) {
    schema.string(key, def, std::move(choices), doc);
  }
  template <typename Enum>
  void choice(const char* key, Enum&, const char* def, std::initializer_list<std::pair<const char*, Enum>> names,
              const char* doc) {
    std::vector<std::string> choices;
    for (const auto& [name, value] : names) choices.emplace_back(name);
    schema.string(key, def, std::move(choices), doc);
  }
  Schema schema;
};

// Fills the structs from a config the schema has checked.
class FieldReader {
 public:
  explicit FieldReader(const Config& cfg) : cfg_(cfg) {}
  template <typename Int>
  void integer(const char* key, Int& field, std::int64_t, std::int64_t, std::int64_t, const char*) {
    field = static_cast<Int>(cfg_.integer(key));
  }
  void real(const char* key, double& field, double, double, double, const char*) { field = cfg_.real(key); }
  void boolean(const char* key, bool& field, bool, const char*) { field = cfg_.boolean(key); }
  void string(const char* key, std::string& field, const char*, const std::vector<std::string>&, const char*) {
    field = cfg_.string(key);
  }
  template <typename Enum>
  void choice(const char* key, Enum& field, const char*, std::initializer_list<std::pair<const char*, Enum>> names,
              const char*) {
    for (const auto& [name, value] : names)
      if (cfg_.string(key) == name) {
        field = value;
        return;
      }
    throw std::logic_error(
        fmt::format("{} = '{}' is in the schema but not in the table's names", key, cfg_.string(key)));
  }

 private:
  const Config& cfg_;
};

}  // namespace

const Schema& run_schema() {
  static const Schema schema = [] {
    SchemaBuilder builder;
    RunConfig unused;  // the builder reads no field
    define_keys(builder, unused);
    return std::move(builder.schema);
  }();
  return schema;
}

RunConfig::RunConfig(Config source) : source_(std::move(source)) {
  FieldReader reader(source_);
  define_keys(reader, *this);
}

RunConfig RunConfig::load(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  return RunConfig(Config::load(run_schema(), yaml_path, overrides));
}

RunConfig RunConfig::parse(const std::string& yaml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  return RunConfig(Config::parse(run_schema(), yaml_text, source_name, overrides));
}

double lr_factor(const RunConfig& cfg) {
  if (cfg.train.lr_peak == 0) return cfg.train.lr_factor;
  return cfg.train.lr_peak * std::sqrt(static_cast<double>(cfg.model.d_model) * static_cast<double>(cfg.train.warmup));
}

std::vector<KeyDifference> key_differences(const RunConfig& first, const RunConfig& second,
                                           std::initializer_list<std::string> keys) {
  std::vector<KeyDifference> differ;
  const auto compare = [&](const std::string& key) {
    const std::string &a = first.source().values().at(key), &b = second.source().values().at(key);
    if (a != b) differ.push_back({key, a, b});
  };
  if (keys.size() > 0) {
    for (const std::string& key : keys) compare(key);
  } else {
    for (const KeySpec& spec : run_schema().keys()) compare(spec.key);
  }
  return differ;
}

std::vector<KeyDifference> model_shape_differences(const RunConfig& first, const RunConfig& second) {
  std::vector<KeyDifference> differ = key_differences(
      first, second,
      {"model.layers", "model.d_model", "model.d_ff", "model.norm", "model.share_embeddings", "model.tie_output"});
  std::vector<KeyDifference> task;
  if (first.data.synthetic() != second.data.synthetic()) {
    task = key_differences(first, second, {"data.task"});
  } else if (first.data.synthetic()) {
    task = key_differences(first, second, {"data.synthetic_vocab"});
  }
  differ.insert(differ.end(), task.begin(), task.end());
  return differ;
}

const char* name_of(Norm norm) { return norm == Norm::pre ? "pre" : "post"; }

const char* name_of(Task task) {
  switch (task) {
    case Task::copy:
      return "copy";
    case Task::reverse:
      return "reverse";
    case Task::sort:
      return "sort";
    case Task::translation:
      break;
  }
  return "translation";
}

}  // namespace tessera::io
