#include "launch/trainer.h"

#include <fmt/core.h>
#include <fmt/os.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/vocab.h"
#include "eval/bleu.h"
#include "io/checkpoint.h"
#include "launch/schema.h"
#include "launch/task.h"
#include "optim/adam.h"

namespace tessera::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::string format_duration(double seconds) {
  const auto s = static_cast<std::int64_t>(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m{:02d}s", s / 3600, (s / 60) % 60, s % 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// JSON numbers: finite values as is, others as null (JSON has no NaN).
std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

struct LossSums {
  double smoothed = 0, nll = 0;
  std::int64_t tokens = 0;
};

// One batch forward (and backward when `grad_scale` > 0): returns the summed losses.
LossSums run_batch(const models::Transformer& model, const data::Batch& b, double smoothing,
                   models::DropoutStream& drop, double grad_scale) {
  const std::int64_t rows = b.tgt_out.numel();
  ag::Var logits = model.forward(b.src, b.src_padding, b.tgt_in, drop);
  logits = ag::reshape(logits, {rows, model.config().tgt_vocab});
  const Tensor targets = b.tgt_out.reshape({rows});
  LossSums s;
  ag::Var loss = ag::cross_entropy(logits, targets, smoothing, data::kPadId, &s.nll);
  s.smoothed = loss.value().item();
  s.tokens = b.tgt_tokens;
  if (grad_scale > 0) ag::scale(loss, grad_scale).backward();
  return s;
}

class Run {
 public:
  explicit Run(const io::Config& cfg)
      : cfg_(cfg),
        dir_(cfg.string("output.dir")),
        task_(load_task_data(cfg)),
        model_(model_config(cfg, task_.codec.size(), task_.codec.size()),
               static_cast<std::uint64_t>(cfg.integer("train.seed"))),
        adam_(model_.parameters(), {.lr = 0.0,
                                    .beta1 = cfg.real("train.adam_beta1"),
                                    .beta2 = cfg.real("train.adam_beta2"),
                                    .eps = cfg.real("train.adam_eps")}),
        batcher_(&task_.train, {.batch_tokens = cfg.integer("train.batch_tokens"),
                                .seed = static_cast<std::uint64_t>(cfg.integer("train.seed")),
                                .shuffle = true,
                                .window = 100}),
        metrics_(dir_ / "metrics.jsonl", std::ios::app) {
    TESSERA_CHECK(!task_.train.empty(), "data: no training pairs left after filtering");
    TESSERA_CHECK(!task_.valid.empty(), "data: no validation pairs left after filtering");
    TESSERA_CHECK(metrics_.good(), "cannot write metrics file '{}'", (dir_ / "metrics.jsonl").string());
    fmt::print("model: {} parameters, {} layers, d_model {}, d_ff {}, {} heads, {}-norm; {} batches per epoch\n",
               model_.num_parameters(), cfg.integer("model.layers"), cfg.integer("model.d_model"),
               cfg.integer("model.d_ff"), cfg.integer("model.heads"), cfg.string("model.norm"),
               batcher_.batches_per_epoch());
  }

  TrainResult train() {
    const std::int64_t max_steps = cfg_.integer("train.max_steps"), max_epochs = cfg_.integer("train.max_epochs");
    const std::int64_t log_every = cfg_.integer("train.log_every"), valid_every = cfg_.integer("train.valid_every");
    const std::int64_t accumulate = cfg_.integer("train.accumulate");
    const double max_seconds = 60.0 * cfg_.real("train.max_minutes");
    const double smoothing = cfg_.real("train.label_smoothing"), clip = cfg_.real("train.clip_norm");
    const auto seed = static_cast<std::uint64_t>(cfg_.integer("train.seed"));
    start_ = Clock::now();
    auto window_start = start_;
    LossSums window;
    std::int64_t window_padded = 0, window_slots = 0;
    TrainResult result;
    std::int64_t step = 0;
    bool out_of_data = false;
    while (step < max_steps && !out_of_data) {
      // Gather the update's batches first: the loss is normalized by all their target tokens.
      std::vector<data::Batch> batches;
      while (static_cast<std::int64_t>(batches.size()) < accumulate) {
        data::Batch b;
        if (batcher_.next(b)) {
          batches.push_back(std::move(b));
        } else if (max_epochs > 0 && batcher_.epoch() >= max_epochs) {
          out_of_data = true;
          break;
        }
      }
      if (batches.empty()) break;
      ++step;
      std::int64_t tokens = 0;
      for (const auto& b : batches) tokens += b.tgt_tokens;
      models::DropoutStream drop{.seed = seed, .offset = static_cast<std::uint64_t>(step) << 32, .training = true};
      for (const auto& b : batches) {
        const LossSums s = run_batch(model_, b, smoothing, drop, 1.0 / static_cast<double>(tokens));
        window.smoothed += s.smoothed;
        window.nll += s.nll;
        window.tokens += s.tokens;
        window_padded += b.padded_slots - b.src_tokens - b.tgt_tokens;
        window_slots += b.padded_slots;
      }
      const double gnorm = clip_gradients(clip);
      const double lr = noam_learning_rate(cfg_.real("train.lr_factor"), cfg_.integer("model.d_model"),
                                           cfg_.integer("train.warmup"), step);
      adam_.step(lr);

      const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
      const bool out_of_time = max_seconds > 0 && elapsed >= max_seconds;
      if (step % log_every == 0 || step == max_steps || out_of_time) {
        const double wsecs = std::chrono::duration<double>(Clock::now() - window_start).count();
        double eta = elapsed / static_cast<double>(step) * static_cast<double>(max_steps - step);
        if (max_seconds > 0) eta = std::min(eta, max_seconds - elapsed);
        const double loss = window.smoothed / static_cast<double>(window.tokens);
        const double ppl = std::exp(window.nll / static_cast<double>(window.tokens));
        const double tps = static_cast<double>(window.tokens) / wsecs;
        const double pad =
            static_cast<double>(window_padded) / static_cast<double>(std::max<std::int64_t>(window_slots, 1));
        fmt::print(
            "step {} | epoch {} | loss {:.4f} | ppl {:.2f} | lr {:.3e} | gnorm {:.3f} | {:.0f} tok/s | pad {:.1f}% | "
            "elapsed {} | eta {}\n",
            step, batcher_.epoch() + 1, loss, ppl, lr, gnorm, tps, 100 * pad, format_duration(elapsed),
            format_duration(eta));
        std::fflush(stdout);
        metrics_ << fmt::format(
            "{{\"step\": {}, \"epoch\": {}, \"loss\": {}, \"ppl\": {}, \"lr\": {}, \"grad_norm\": {}, "
            "\"tokens_per_s\": {}, \"padding\": {}, \"elapsed_s\": {}, \"eta_s\": {}}}\n",
            step, batcher_.epoch() + 1, json_number(loss), json_number(ppl), json_number(lr), json_number(gnorm),
            json_number(tps), json_number(pad), json_number(elapsed), json_number(eta));
        metrics_.flush();
        window = {};
        window_padded = window_slots = 0;
        window_start = Clock::now();
      }
      if (valid_every > 0 && step % valid_every == 0 && step != max_steps && !out_of_time) validate(step, result);
      if (out_of_time) {
        fmt::print("train: stopping at step {}: train.max_minutes = {} reached\n", step,
                   cfg_.real("train.max_minutes"));
        break;
      }
    }
    if (out_of_data) fmt::print("train: stopping after {} epochs (train.max_epochs)\n", max_epochs);
    validate(step, result);
    result.steps = step;
    result.checkpoint = (dir_ / "model.h5").string();
    io::save_weights(result.checkpoint, model_.parameters(), cfg_.to_yaml(false), step);
    fmt::print("train: saved {} after {} steps ({})\n", result.checkpoint, step,
               format_duration(std::chrono::duration<double>(Clock::now() - start_).count()));
    return result;
  }

 private:
  // Global gradient norm; scales the gradients down to `clip` when it is exceeded (clip > 0).
  double clip_gradients(double clip) {
    double sq = 0;
    for (const ag::Var& p : model_.parameters()) {
      if (!p.grad().defined()) continue;
      for (double g : p.grad().to_doubles()) sq += g * g;
    }
    const double norm = std::sqrt(sq);
    if (clip > 0 && norm > clip) {
      for (const ag::Var& p : model_.parameters()) {
        if (!p.grad().defined()) continue;
        Tensor g = p.grad();
        float* d = g.data<float>();
        const auto f = static_cast<float>(clip / norm);
        for (std::int64_t i = 0; i < g.numel(); ++i) d[i] *= f;
      }
    }
    return norm;
  }

  void validate(std::int64_t step, TrainResult& result) {
    const auto t0 = Clock::now();
    ag::NoGradGuard no_grad;
    data::Batcher valid(&task_.valid,
                        {.batch_tokens = cfg_.integer("train.batch_tokens"), .seed = 0, .shuffle = false, .window = 1});
    LossSums sums;
    data::Batch b;
    models::DropoutStream no_dropout;
    while (valid.next(b)) {
      const LossSums s = run_batch(model_, b, cfg_.real("train.label_smoothing"), no_dropout, 0.0);
      sums.smoothed += s.smoothed;
      sums.nll += s.nll;
      sums.tokens += s.tokens;
    }
    result.valid_loss = sums.smoothed / static_cast<double>(sums.tokens);
    result.valid_ppl = std::exp(sums.nll / static_cast<double>(sums.tokens));

    std::int64_t n = static_cast<std::int64_t>(task_.valid.size());
    if (cfg_.integer("train.valid_max_sentences") > 0) n = std::min(n, cfg_.integer("train.valid_max_sentences"));
    std::vector<std::vector<std::int32_t>> sources;
    for (std::int64_t i = 0; i < n; ++i) sources.push_back(task_.valid[static_cast<std::size_t>(i)].src);
    const models::TokenRows hyps =
        translate_ids(model_, sources, decode_options(cfg_), cfg_.integer("decode.batch_sentences"));
    std::string extra;
    if (task_.synthetic) {
      std::int64_t exact = 0;
      for (std::int64_t i = 0; i < n; ++i)
        exact += hyps[static_cast<std::size_t>(i)] == task_.valid[static_cast<std::size_t>(i)].tgt;
      result.valid_accuracy = static_cast<double>(exact) / static_cast<double>(n);
      extra = fmt::format("exact match {:.2f}% ({} of {})", 100 * result.valid_accuracy, exact, n);
    } else {
      std::vector<std::string> out, refs(task_.valid_refs.begin(), task_.valid_refs.begin() + n);
      for (const auto& h : hyps) out.push_back(task_.codec.decode(h));
      const eval::BleuScore bleu = eval::corpus_bleu(out, {refs});
      result.valid_bleu = bleu.score;
      extra = fmt::format("BLEU {:.2f} on {} sentences", bleu.score, n);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    fmt::print("valid {} | loss {:.4f} | ppl {:.2f} | {} | beam {} | {:.1f}s\n", step, result.valid_loss,
               result.valid_ppl, extra, cfg_.integer("decode.beam"), secs);
    std::fflush(stdout);
    metrics_ << fmt::format(
        "{{\"step\": {}, \"valid_loss\": {}, \"valid_ppl\": {}, \"valid_bleu\": {}, \"valid_accuracy\": {}, "
        "\"valid_seconds\": {}}}\n",
        step, json_number(result.valid_loss), json_number(result.valid_ppl), json_number(result.valid_bleu),
        json_number(result.valid_accuracy), json_number(secs));
    metrics_.flush();
  }

  const io::Config& cfg_;
  std::filesystem::path dir_;
  TaskData task_;
  models::Transformer model_;
  optim::Adam adam_;
  data::Batcher batcher_;
  std::ofstream metrics_;
  Clock::time_point start_;
};

}  // namespace

double noam_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t step) {
  const double s = static_cast<double>(std::max<std::int64_t>(step, 1));
  return factor / std::sqrt(static_cast<double>(d_model)) *
         std::min(1.0 / std::sqrt(s), s * std::pow(static_cast<double>(warmup), -1.5));
}

TrainResult run_training(const io::Config& cfg) {
  // The model's own constraints (heads divide d_model, ...) fail now, before data is read.
  models::validate(model_config(cfg, 1000, 1000));
  const std::filesystem::path dir(cfg.string("output.dir"));
  std::filesystem::create_directories(dir);
  const std::string yaml = cfg.to_yaml(false);
  fmt::print("config (effective):\n{}", yaml);
  {
    std::ofstream out(dir / "config.yaml");
    out << cfg.to_yaml(true);
    TESSERA_CHECK(out.good(), "cannot write '{}'", (dir / "config.yaml").string());
  }
  Run run(cfg);
  return run.train();
}

}  // namespace tessera::launch
