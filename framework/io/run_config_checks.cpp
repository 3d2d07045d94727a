// Every check of keys that are each valid alone but not together, in one place.
#include <fmt/core.h>

#include "io/run_config.h"

namespace tessera::io {
namespace {

// A config error about `keys`, prefixed with where they were set (see Config::where): every rank
// reads the same config and meets it alike, so one rank prints it.
template <typename... Args>
void check(const RunConfig& cfg, std::initializer_list<std::string> keys, bool ok, fmt::format_string<Args...> f,
           Args&&... args) {
  if (!ok) throw ConfigError(cfg.where(keys) + ": " + fmt::format(f, std::forward<Args>(args)...));
}

// A training sequence of `longest` tokens takes one position more (eos on the source side, bos in
// the decoder's input): without this check the first such batch would fail mid-run.
void check_fits_positions(const RunConfig& cfg, const char* length_key, std::int64_t longest) {
  const std::int64_t positions = cfg.model.max_positions;
  check(cfg, {length_key, "model.max_positions"}, longest + 1 <= positions,
        "{} = {} needs model.max_positions >= {} (a sequence plus eos or bos), but it is {}", length_key, longest,
        longest + 1, positions);
}

void check_synthetic_keys(const RunConfig& cfg) {
  const DataConfig& d = cfg.data;
  check(cfg, {"data.synthetic_min_len", "data.synthetic_max_len"}, d.synthetic_min_len <= d.synthetic_max_len,
        "data.synthetic_min_len = {} exceeds data.synthetic_max_len = {}", d.synthetic_min_len, d.synthetic_max_len);
  check(cfg, {"train.best_metric", "data.task"}, cfg.train.best_metric != BestMetric::chrf,
        "train.best_metric = chrf needs a translation task: a synthetic task ('{}') is scored by exact match "
        "(train.best_metric = bleu) or perplexity (ppl)",
        name_of(d.task));
  check_fits_positions(cfg, "data.synthetic_max_len", d.synthetic_max_len);
}

void check_translation_keys(const RunConfig& cfg) {
  const DataConfig& d = cfg.data;
  const std::pair<const char*, const std::string*> files[] = {{"data.train_src", &d.train_src},
                                                              {"data.train_tgt", &d.train_tgt},
                                                              {"data.valid_src", &d.valid_src},
                                                              {"data.valid_tgt", &d.valid_tgt}};
  for (const auto& [key, value] : files)
    check(cfg, {"data.task", key}, !value->empty(), "data.task is 'translation' but {} is not set", key);
  check(cfg, {"data.vocab_tgt", "data.joint_vocab"}, !d.joint_vocab || d.vocab_tgt.empty(),
        "data.vocab_tgt = '{}' is set but data.joint_vocab is true (set data.joint_vocab: false for one vocabulary "
        "per language)",
        d.vocab_tgt);
  check(cfg, {"data.joint_vocab", "model.share_embeddings"}, d.joint_vocab || !cfg.model.share_embeddings,
        "data.joint_vocab is false but model.share_embeddings is true: one embedding table needs one vocabulary (set "
        "model.share_embeddings: false)");
  check_fits_positions(cfg, "data.max_len", d.max_len);
}

}  // namespace

void check_key_combinations(const RunConfig& cfg) {
  check(cfg, {"train.patience", "train.valid_every"}, cfg.train.patience == 0 || cfg.train.valid_every > 0,
        "train.patience = {} counts validations during training, but train.valid_every is 0 (only one at the end): "
        "set train.valid_every",
        cfg.train.patience);
  check(cfg, {"train.fit_steps_to_time", "train.max_minutes"},
        !cfg.train.fit_steps_to_time || cfg.train.max_minutes > 0,
        "train.fit_steps_to_time fits the steps to train.max_minutes, which is 0 (no limit): set train.max_minutes");
  check(cfg, {"output.dir"}, !cfg.output.dir.empty(), "output.dir is empty: name the folder for the run's files");
  // Checked here, not by the key's range: the configs stored in older checkpoints (translated,
  // averaged) may hold 0.
  check(cfg, {"train.adam_eps"}, cfg.train.adam_eps > 0,
        "train.adam_eps = 0: Adam divides by sqrt(v) + eps, so a weight whose gradients have all been 0 so far (a "
        "unit no example reached) would get 0 / 0 = NaN: give a positive value (1e-9, the paper's)");
  if (cfg.data.synthetic())
    check_synthetic_keys(cfg);
  else
    check_translation_keys(cfg);
}

}  // namespace tessera::io
