// Tessera's experiment config as typed structs: the one schema of configs/*.yaml (every key's
// type, default, range and description, defined once in run_config.cpp), parsed and checked once.
// Code outside framework/io reads these fields, never a key by its name.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "io/config.h"
#include "tensor/dtype.h"

namespace tessera::io {

enum class Norm { post, pre };                         // layer norm after the residual sum (paper), or inside
enum class Task { translation, copy, reverse, sort };  // parallel text, or a built-in synthetic task
enum class LrSchedule { inverse_sqrt, linear };
enum class BestMetric { bleu, chrf, ppl };
enum class Precision { fp32, bf16 };
enum class Recompute { none, layer };  // keep every activation, or recompute each layer's in backward

struct ModelConfig {
  std::int64_t layers = 0, d_model = 0, d_ff = 0, heads = 0;
  double dropout = 0;
  Norm norm = Norm::post;
  bool share_embeddings = true, tie_output = true;
  std::int64_t max_positions = 0;
};

struct DataConfig {
  Task task = Task::translation;
  std::string train_src, train_tgt, valid_src, valid_tgt;
  bool joint_vocab = true;
  std::string vocab, vocab_tgt;
  std::int64_t vocab_size = 0;
  std::string vocab_type;  // SentencePiece's own name of the model type: bpe or unigram
  std::int64_t max_len = 0;
  bool cache = true;
  std::string cache_dir;
  std::int64_t synthetic_vocab = 0, synthetic_min_len = 0, synthetic_max_len = 0;
  std::int64_t synthetic_train_size = 0, synthetic_valid_size = 0;

  bool synthetic() const { return task != Task::translation; }
};

struct TrainConfig {
  std::int64_t batch_tokens = 0, accumulate = 1, max_steps = 0, max_epochs = 0;
  double max_minutes = 0;
  bool fit_steps_to_time = false;  // max_steps from the measured speed, so the schedule ends at max_minutes
  double lr_factor = 0, lr_peak = 0;
  std::int64_t warmup = 0;
  LrSchedule lr_schedule = LrSchedule::inverse_sqrt;
  double adam_beta1 = 0, adam_beta2 = 0, adam_eps = 0;
  double label_smoothing = 0, clip_norm = 0;
  std::uint64_t seed = 0;
  std::int64_t log_every = 0, valid_every = 0, valid_max_sentences = 0, patience = 0;
  BestMetric best_metric = BestMetric::bleu;
  Device device = Device::cpu;
  Precision precision = Precision::fp32;
  bool tf32 = false;
  Recompute recompute = Recompute::none;
  bool memory_check = true;
};

struct DecodeConfig {
  std::int64_t beam = 0;
  double length_penalty = 0;
  std::int64_t max_extra_len = 0, batch_sentences = 0;
};

struct ParallelConfig {
  std::int64_t tensor = 1, data = 1;
  double bucket_mb = 0;
  bool overlap = true;
  double timeout_s = 0;
  bool measure_comm = false;
  std::int64_t zero = 0;
  bool vocab_parallel = false;
};

struct CheckpointConfig {
  std::int64_t every = 0, keep_last = 0;
  bool keep_best = true;
};

struct OutputConfig {
  std::string dir;
};

class RunConfig {
 public:
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  DecodeConfig decode;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  OutputConfig output;

  // Defaults, then the YAML file (when not empty), then each "a.b=v" override; throws ConfigError.
  static RunConfig load(const std::string& yaml_path, const std::vector<std::string>& overrides);
  // The same from YAML text (a checkpoint's saved config, a test's); `source_name` names it in errors.
  static RunConfig parse(const std::string& yaml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides = {});
  RunConfig() = default;
  // The typed view of a config read with run_schema().
  explicit RunConfig(Config source);

  // The values as read: where each key was set, and the YAML a checkpoint keeps.
  const Config& source() const { return source_; }
  std::string where(std::initializer_list<std::string> keys) const { return source_.where(keys); }
  std::string to_yaml(bool with_docs) const { return source_.to_yaml(with_docs); }

 private:
  Config source_;
};

// The schema of every key (the table in run_config.cpp).
const Schema& run_schema();

// The learning-rate factor: train.lr_factor, or the one whose peak (at step train.warmup) is
// train.lr_peak when that is set.
double lr_factor(const RunConfig& cfg);

// Keys that are each valid alone but not together, checked in one place before any work; the
// error names where each was set. The data files' kinds are checked where they are read.
void check_key_combinations(const RunConfig& cfg);

// A key whose value differs between two configs: `first` in the one, `second` in the other.
struct KeyDifference {
  std::string key, first, second;
};
// The keys that shape the model's parameters (their names and shapes) and differ between two
// configs: layers, widths, the norms' place, embedding sharing and tying, and the kind of task
// (the synthetic tasks share one shape, set by data.synthetic_vocab). model.heads is not one: the
// same weights split into other heads (another function, with the same shapes).
std::vector<KeyDifference> model_shape_differences(const RunConfig& first, const RunConfig& second);
// Those of `keys` whose values differ; with no keys, every key that differs, in schema order.
std::vector<KeyDifference> key_differences(const RunConfig& first, const RunConfig& second,
                                           std::initializer_list<std::string> keys = {});

const char* name_of(Norm norm);
const char* name_of(Task task);

}  // namespace tessera::io
