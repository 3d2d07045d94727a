#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "eval/bleu.h"
#include "eval/chrf.h"
#include "models/from_config.h"
#include "models/translator.h"
#include "train/forced_loss.h"
#include "train/metrics_log.h"
#include "train/run.h"
#include "train/stop_signals.h"

namespace tessera::train {

// false: interrupted by a stop signal on some rank (every rank returns false alike).
// counts: a validation without a better score counts toward train.patience.
bool Run::validate(std::int64_t step, TrainResult& result, bool counts) {
  const auto t0 = Clock::now();
  ag::NoGradGuard no_grad;
  const LossSums sums = validation_loss();
  result.valid_loss = sums.smoothed / static_cast<double>(sums.tokens);
  result.valid_ppl = std::exp(sums.nll / static_cast<double>(sums.tokens));
  std::int64_t n = static_cast<std::int64_t>(task_.valid.size());
  if (cfg_.train.valid_max_sentences > 0) n = std::min(n, cfg_.train.valid_max_sentences);
  std::vector<std::vector<std::int32_t>> sources;
  for (std::int64_t i = 0; i < n; ++i) sources.push_back(task_.valid[static_cast<std::size_t>(i)].src);
  // A stop signal on any rank ends the decoding early (it can take minutes): no score then.
  const models::DecodeInterrupt interrupt{grid_.world.get(), [] { return own_stop_signal() != 0; }};
  const std::optional<models::TokenRows> decoded = models::translate_ids(
      model_, sources, models::decode_options(cfg_.decode), cfg_.decode.batch_sentences, grid_.data.get(), &interrupt);
  if (!decoded) {
    fmt::print("valid {}: interrupted by a stop signal (no score)\n", step);
    std::fflush(stdout);
    return false;
  }
  const std::string scores = score_translations(result, n, *decoded);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool best = record_validation(step, result, counts);
  fmt::print("valid {} | loss {:.4f} | ppl {:.2f} | {} | beam {} | {:.1f}s\n", step, result.valid_loss,
             result.valid_ppl, scores, cfg_.decode.beam, secs);
  std::fflush(stdout);
  metrics_.write(
      fmt::format("{{\"step\": {}, \"valid_loss\": {}, \"valid_ppl\": {}, \"valid_bleu\": {}, \"valid_chrf\": {}, "
                  "\"valid_accuracy\": {}, \"valid_seconds\": {}}}\n",
                  step, json_number(result.valid_loss), json_number(result.valid_ppl), json_number(result.valid_bleu),
                  json_number(result.valid_chrf), json_number(result.valid_accuracy), json_number(secs)));
  if (best && cfg_.checkpoint.keep_best) {
    const std::string path = (dir_ / "checkpoint_best.h5").string();
    write_checkpoint(path, true);
    fmt::print("checkpoint: saved {} (best so far)\n", path);
  }
  return true;
}

// The label-smoothed loss and NLL of the validation pairs; the data-parallel replicas share the
// work, with the loss of one process, bit for bit.
LossSums Run::validation_loss() {
  return forced_decoding_loss(model_, task_.valid, cfg_.train.batch_tokens, cfg_.train.label_smoothing,
                              grid_.data.get());
}

// Exact match (synthetic tasks) or BLEU and chrF2 of the first `n` validation pairs' translations,
// into `result`; returns them as the validation line says them.
std::string Run::score_translations(TrainResult& result, std::int64_t n, const models::TokenRows& hyps) const {
  if (task_.synthetic) {
    std::int64_t exact = 0;
    for (std::int64_t i = 0; i < n; ++i)
      exact += hyps[static_cast<std::size_t>(i)] == task_.valid[static_cast<std::size_t>(i)].tgt;
    result.valid_accuracy = static_cast<double>(exact) / static_cast<double>(n);
    return fmt::format("exact match {:.2f}% ({} of {})", 100 * result.valid_accuracy, exact, n);
  }
  std::vector<std::string> out, refs(task_.valid_refs.begin(), task_.valid_refs.begin() + n);
  for (const auto& h : hyps) out.push_back(task_.tgt_codec.decode(h));
  const eval::BleuScore bleu = eval::corpus_bleu(out, {refs});
  result.valid_bleu = bleu.score;
  result.valid_chrf = eval::corpus_chrf(out, {refs}).score;
  return fmt::format("BLEU {:.2f} | chrF2 {:.2f} on {} sentences", bleu.score, result.valid_chrf, n);
}

// Notes the validation of `step` and whether it is the best so far (returned); one that is not
// counts toward train.patience when `counts`.
bool Run::record_validation(std::int64_t step, const TrainResult& result, bool counts) {
  const BestMetric by = best_metric();
  const double score = result.*by.field;
  const bool best = std::isnan(best_valid_) || (by.lower_is_better ? score < best_valid_ : score > best_valid_);
  if (best) {
    best_valid_ = score;
    best_valid_step_ = step;
    validations_since_best_ = 0;
  } else if (counts) {
    ++validations_since_best_;
  }
  last_validated_step_ = step;
  return best;
}

Run::BestMetric Run::best_metric() const {
  const io::BestMetric metric = cfg_.train.best_metric;
  if (metric == io::BestMetric::ppl) return {&TrainResult::valid_ppl, "perplexity", 1.0, true};
  if (metric == io::BestMetric::chrf) return {&TrainResult::valid_chrf, "chrF2", 1.0, false};
  if (task_.synthetic) return {&TrainResult::valid_accuracy, "exact match", 100.0, false};
  return {&TrainResult::valid_bleu, "BLEU", 1.0, false};
}

void Run::print_early_stop(std::int64_t step) const {
  const BestMetric m = best_metric();
  const std::string best =
      fmt::format("{} than {:.2f}{}", m.name, m.shown_scale * best_valid_, m.shown_scale == 100.0 ? "%" : "");
  fmt::print(
      "train: stopping early at step {}: {} validations in a row without a better {} (step {}; "
      "train.patience){}\n",
      step, validations_since_best_, best, best_valid_step_, where_best_model_is());
}

// "; FILE holds that model" for the checkpoint_best.h5 that holds the best validation's step:
// this run's, or for a fork whose best came before it, the one of the folder it continued from
// (the fork has none of that step). Empty when neither does (checkpoint.keep_best off, or deleted).
std::string Run::where_best_model_is() const {
  if (!cfg_.checkpoint.keep_best || !grid_.root()) return "";
  for (const std::filesystem::path& folder : {dir_, fork_source_}) {
    const std::filesystem::path best = folder / "checkpoint_best.h5";
    try {
      if (!folder.empty() && std::filesystem::exists(best) && io::checkpoint_step(best.string()) == best_valid_step_)
        return fmt::format("; {} holds that model", best.string());
    } catch (const Error&) {  // unreadable: not that model, as far as anyone can tell
    }
  }
  return "";
}

}  // namespace tessera::train
