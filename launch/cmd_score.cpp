// `tessera score`: corpus BLEU (and, with --metrics, chrF / chrF++) of a hypothesis file (or stdin)
// against one or more reference files, as sacreBLEU's default scores (BLEU: 13a, mixed case, exp
// smoothing; chrF: 6 character orders, beta 2, and 2 word orders for chrF++). With --checkpoint,
// --metrics loss ppl: the reference's per-token cross entropy under the model (teacher forcing, as
// fairseq's validate), equal to what training's validation logs for the same checkpoint and pairs.
//   tessera score --ref newstest.de [--ref second.de] [--hyp out.de] [-m bleu chrf chrf++] [--score-only | --json]
//   tessera score --ref newstest.de --checkpoint run/model.h5 --src newstest.en   (translate, then score)
//   tessera score --ref newstest.de --checkpoint run/model.h5 --src newstest.en -m loss ppl   (forced decoding)
// Under mpirun, rank 0 scores; with --checkpoint the ranks share the translation first.
// Files are read as sacreBLEU reads them: UTF-8, lines split on "\n" only; each line is
// right-stripped of whitespace (so "\r\n" line ends do not matter) before tokenization. Standard
// input is read the same way (sacreBLEU's own differs there: a lone "\r" ends a line, and a tab
// separates the lines of several systems).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/text.h"
#include "data/corpus.h"
#include "dist/launcher.h"
#include "dist/mpi_communicator.h"
#include "eval/bleu.h"
#include "eval/chrf.h"
#include "io/run_config.h"
#include "launch/commands.h"
#include "models/from_config.h"
#include "models/translator.h"
#include "train/forced_loss.h"

namespace tessera::launch {

using dist::launcher_rank;
using dist::mpi_world_for_decoding;
using dist::root_first;
using models::check_same_decoding;
using models::load_translator;
using models::read_sources;
using models::Translator;
namespace {

struct ScoreOptions {
  std::vector<std::string> refs;
  std::string hyp = "-";
  std::vector<std::string> checkpoints;  // translate src with the checkpoint (several: an ensemble) instead of reading
  std::string src;                       // hypotheses
  bool score_only = false;
  bool json = false;
  std::vector<std::string> metrics = {"bleu"};  // printed in the order given, one line each
  std::string device = "cpu";                   // where --checkpoint translates
  std::int64_t batch = 0;                       // sentences --checkpoint decodes together (0: the config's)
  double timeout_s = 300;                       // --checkpoint under mpirun, as parallel.timeout_s
};

std::vector<std::string> read_file_lines(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("score: {} file '{}' is a directory", what, path);
  // Checked without opening it: a named pipe opened and closed here would lose its writer's text.
  if (::access(path.c_str(), R_OK) != 0) {
    const int error = errno;
    if (path == "-")  // standard input holds the hypotheses (--hyp -), never a reference
      fail(
          "score: there is no {} file '-' (standard input is read for the hypotheses only: give the references "
          "as files)",
          what);
    fail("score: cannot open {} file '{}': {}", what, path, std::strerror(error));
  }
  // As the other commands read text (gzipped through zlib, UTF-8 checked, lines of at most 1 MiB),
  // "\r" ends dropped as by sacreBLEU's universal newlines.
  return data::read_lines(path);
}

std::string json_number_list(const std::array<double, 4>& v) {
  return fmt::format("[{}, {}, {}, {}]", v[0], v[1], v[2], v[3]);
}

std::string json_int_list(const std::array<std::int64_t, 4>& v) {
  return fmt::format("[{}, {}, {}, {}]", v[0], v[1], v[2], v[3]);
}

std::vector<std::vector<std::string>> read_references(const std::vector<std::string>& paths) {
  std::vector<std::vector<std::string>> refs;
  for (const auto& path : paths) refs.push_back(read_file_lines(path, "reference"));
  return refs;
}

void check_line_counts(const std::vector<std::vector<std::string>>& refs, const std::vector<std::string>& ref_paths,
                       std::size_t lines, const std::string& what) {
  for (std::size_t i = 0; i < refs.size(); ++i)
    if (refs[i].size() != lines)
      fail("score: {} has {} but reference file '{}' has {}", what, counted(lines, "line"), ref_paths[i],
           counted(refs[i].size(), "line"));
}

void print_bleu(const eval::BleuScore& s, std::size_t nrefs, const ScoreOptions& opt) {
  if (opt.score_only) {
    fmt::print("{:.2f}\n", s.score);
  } else if (opt.json) {
    fmt::print(
        "{{\"name\": \"BLEU\", \"score\": {}, \"precisions\": {}, \"bp\": {}, \"ratio\": {}, \"hyp_len\": {}, "
        "\"ref_len\": {}, \"counts\": {}, \"totals\": {}, \"nrefs\": {}, \"tok\": \"13a\", \"summary\": \"{}\"}}\n",
        s.score, json_number_list(s.precisions), s.brevity_penalty, s.ratio, s.hyp_len, s.ref_len,
        json_int_list(s.matches), json_int_list(s.totals), nrefs, s.summary());
  } else {
    fmt::print("{}\n", s.summary());
  }
}

void print_chrf(const eval::ChrfScore& s, std::size_t nrefs, const ScoreOptions& opt) {
  if (opt.score_only) {
    fmt::print("{:.2f}\n", s.score);
  } else if (opt.json) {
    fmt::print(
        "{{\"name\": \"{}\", \"score\": {}, \"char_order\": {}, \"word_order\": {}, \"beta\": {}, \"nrefs\": {}, "
        "\"summary\": \"{}\"}}\n",
        s.name(), s.score, s.char_order, s.word_order, s.beta, nrefs, s.summary());
  } else {
    fmt::print("{}\n", s.summary());
  }
}

bool is_loss_metric(const std::string& metric) { return metric == "loss" || metric == "ppl"; }

bool wants(const ScoreOptions& opt, bool (*kind)(const std::string&), bool is) {
  return std::any_of(opt.metrics.begin(), opt.metrics.end(), [&](const std::string& m) { return kind(m) == is; });
}

// Refused before anything is read or translated.
void check_metrics(const ScoreOptions& opt) {
  for (std::size_t i = 0; i < opt.metrics.size(); ++i)  // a metric named twice would print twice
    if (std::find(opt.metrics.begin(), opt.metrics.begin() + static_cast<std::ptrdiff_t>(i), opt.metrics[i]) !=
        opt.metrics.begin() + static_cast<std::ptrdiff_t>(i))
      throw EveryRankError(fmt::format("score: --metrics names '{}' twice", opt.metrics[i]));
  if (!wants(opt, is_loss_metric, true)) return;
  if (opt.checkpoints.empty())
    throw EveryRankError(
        "score: --metrics loss and ppl are a model's loss on the references: give --checkpoint and --src");
  if (opt.checkpoints.size() > 1)
    throw EveryRankError("score: --metrics loss and ppl take one --checkpoint (an ensemble has no single loss)");
  if (opt.refs.size() != 1)
    throw EveryRankError("score: --metrics loss and ppl take one --ref: the target side of --src");
}

// What the metrics are computed from: the hypotheses with their references, and with a checkpoint
// asked for loss or ppl, the references' loss under it.
struct ScoreInputs {
  bool root = true;  // under mpirun, rank 0 prints the scores
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
  std::string hyp_source;
  std::optional<train::LossSums> loss;
};

ScoreInputs read_hypotheses(const ScoreOptions& opt) {
  ScoreInputs in;
  in.root = launcher_rank() == 0;
  if (!in.root) return in;  // under mpirun, rank 0 scores (and alone has standard input)
  const bool from_stdin = opt.hyp == "-";
  in.hyps = from_stdin ? data::read_standard_input_lines() : read_file_lines(opt.hyp, "hypothesis");
  in.hyp_source = from_stdin ? std::string("standard input") : fmt::format("hypothesis file '{}'", opt.hyp);
  in.refs = read_references(opt.refs);
  return in;
}

// The loss of the pairs (source line, reference line) under teacher forcing, label smoothing off,
// as training's validation computes it (the checkpoint's data.max_len and train.batch_tokens); the
// ranks of `world` share the batches.
train::LossSums reference_loss(const ScoreOptions& opt, const Translator& translator,
                               const std::vector<std::string>& src, dist::Communicator* world) {
  const io::RunConfig& cfg = translator.config();
  data::EncodedPairs pairs;
  root_first(world, [&] {
    data::ParallelText text{src, read_file_lines(opt.refs[0], "reference")};
    check_line_counts({text.tgt}, opt.refs, src.size(), opt.src == "-" ? "standard input" : "--src '" + opt.src + "'");
    pairs = data::encode_pairs(translator.source_codec(), translator.target_codec(), text, cfg.data.max_len);
  });
  const bool root = world == nullptr || world->rank() == 0;
  if (root && (pairs.empty > 0 || pairs.too_long > 0))
    print_to_stderr("score: the loss leaves out {} (empty on either side) and {} (over data.max_len = {} tokens)\n",
                    counted(pairs.empty, "pair"), counted(pairs.too_long, "pair"), cfg.data.max_len);
  if (pairs.examples.empty()) throw EveryRankError("score: no pair left to compute a loss on");
  return train::forced_decoding_loss(translator.model(), pairs.examples, cfg.train.batch_tokens, 0.0, world);
}

ScoreInputs score_checkpoint(const ScoreOptions& opt) {
  // Translate the source with the checkpoint's own decoding settings, then score that. Under
  // mpirun the ranks share the sentences, and rank 0 reads the references and scores.
  const std::unique_ptr<dist::MpiCommunicator> world = mpi_world_for_decoding(opt.timeout_s);
  ScoreInputs in;
  in.root = world == nullptr || world->rank() == 0;
  const bool src_stdin = opt.src == "-";  // as --hyp - and translate -i -
  // Counted: under an MPMD launch some ranks may have --src FILE and others not.
  if (world != nullptr && world->size() > 1 && dist::count_ranks(src_stdin, world.get()) > 0)
    throw EveryRankError(
        "score --checkpoint under mpirun: give the source with --src FILE (mpirun passes standard input to rank 0 "
        "only)");
  const std::string src_name = src_stdin ? std::string("standard input") : fmt::format("source file '{}'", opt.src);
  const std::unique_ptr<Translator> translator =
      load_translator(world.get(), opt.checkpoints, "", "", opt.device == "cuda" ? Device::cuda : Device::cpu);
  // Read once: standard input cannot be read again for the translation.
  const std::vector<std::string> src = src_stdin ? data::read_standard_input_lines() : std::vector<std::string>{};
  const auto source_lines = [&] { return src_stdin ? src : read_file_lines(opt.src, "source"); };
  if (wants(opt, is_loss_metric, true)) in.loss = reference_loss(opt, *translator, source_lines(), world.get());
  if (!wants(opt, is_loss_metric, false)) return in;
  const std::vector<std::vector<std::int32_t>> sources = read_sources(world.get(), *translator, src_name, [&] {
    std::vector<std::string> lines = source_lines();
    if (in.root) {  // before the translation: a bad reference file is reported at once
      in.refs = read_references(opt.refs);
      check_line_counts(in.refs, opt.refs, lines.size(), src_name);
    }
    return lines;
  });
  const io::RunConfig& cfg = translator->config();
  const std::int64_t batch = opt.batch > 0 ? opt.batch : cfg.decode.batch_sentences;
  check_same_decoding(models::decode_options(cfg.decode), batch, 0, world.get());
  Progress progress("score: translate", "sentences", std::ssize(sources), in.root);
  translator->report_progress_to(&progress);
  in.hyps = translator->translate(sources, models::decode_options(cfg.decode), batch, world.get());
  progress.finish();
  in.hyp_source =
      src_stdin ? std::string("the translation of standard input") : fmt::format("the translation of '{}'", opt.src);
  return in;
}

// loss: NLL per target token (nats); ppl: its exponential.
void print_loss(const std::string& metric, const train::LossSums& sums, const ScoreOptions& opt) {
  const double loss = sums.nll / static_cast<double>(sums.tokens);
  const double value = metric == "ppl" ? std::exp(loss) : loss;
  const bool ppl = metric == "ppl";
  if (opt.score_only) {
    fmt::print("{}\n", ppl ? fmt::format("{:.2f}", value) : fmt::format("{:.4f}", value));
  } else if (opt.json) {
    fmt::print("{{\"name\": \"{}\", \"score\": {}, \"tokens\": {}, \"label_smoothing\": 0}}\n", metric, value,
               sums.tokens);
  } else if (ppl) {
    fmt::print("ppl = {:.2f} ({} target tokens, label smoothing off)\n", value, sums.tokens);
  } else {
    fmt::print("loss = {:.4f} nats per target token ({} target tokens, label smoothing off)\n", value, sums.tokens);
  }
}

int run_score(const ScoreOptions& opt) {
  check_metrics(opt);
  const ScoreInputs in = opt.checkpoints.empty() ? read_hypotheses(opt) : score_checkpoint(opt);
  if (!in.root) return 0;
  if (wants(opt, is_loss_metric, false)) {
    if (in.hyps.empty()) fail("score: no hypothesis lines in {}", in.hyp_source);
    check_line_counts(in.refs, opt.refs, in.hyps.size(), in.hyp_source);
  }
  for (const std::string& metric : opt.metrics) {
    if (is_loss_metric(metric)) {
      print_loss(metric, *in.loss, opt);
    } else if (metric == "bleu") {
      print_bleu(eval::corpus_bleu(in.hyps, in.refs), in.refs.size(), opt);
    } else {
      print_chrf(eval::corpus_chrf(in.hyps, in.refs, metric == "chrf++" ? 2 : 0), in.refs.size(), opt);
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

Command add_score_command(CLI::App& parent) {
  auto opt = std::make_shared<ScoreOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "score",
      "Corpus BLEU (and chrF, chrF++) of hypotheses against references, identical to sacreBLEU's default scores");
  cmd->add_option("--ref,-r", opt->refs,
                  "Reference file(s), one segment per line; several files: several reference sets")
      ->required();
  auto* hyp =
      cmd->add_option("--hyp,-i", opt->hyp, "Hypothesis file, one segment per line ('-' or absent: standard input)");
  auto* checkpoint =
      cmd->add_option("--checkpoint", opt->checkpoints,
                      "Instead of --hyp: translate --src with this checkpoint (any kind; several: an ensemble, as in "
                      "translate) and score that")
          ->excludes(hyp);
  cmd->add_option("--src,-s", opt->src, "Source file translated with --checkpoint ('-': standard input)")
      ->needs(checkpoint);
  cmd->add_option("--device", opt->device,
                  "Where --checkpoint translates: cpu or cuda (the first GPU; under mpirun, local rank % GPUs)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->needs(checkpoint);
  add_whole_number_option(cmd, "--batch", opt->batch, 1, 100000,
                          "Sentences --checkpoint decodes together (default: from the config)")
      ->needs(checkpoint);
  add_timeout_option(cmd, opt->timeout_s)->needs(checkpoint);
  checkpoint->needs(cmd->get_option("--src"));
  cmd->add_option("--metrics,-m", opt->metrics,
                  "Scores to print, one line each, in the order given: bleu, chrf (chrF2), chrf++ (chrF2++); with "
                  "--checkpoint also loss and ppl (the reference's cross entropy per token under the model, label "
                  "smoothing off, and its perplexity)")
      ->check(CLI::IsMember({"bleu", "chrf", "chrf++", "loss", "ppl"}))
      ->capture_default_str();
  auto* score_only = cmd->add_flag("--score-only,-b", opt->score_only, "Print only the score, with 2 decimals");
  cmd->add_flag("--json", opt->json,
                "Print a JSON object per metric: name, score, and its details (BLEU: precisions, bp, ratio, ...)")
      ->excludes(score_only);
  return {cmd, [opt] { return run_score(*opt); }};
}

}  // namespace tessera::launch
