#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "data/corpus.h"
#include "io/checkpoint.h"
#include "launch/commands.h"
#include "launch/schema.h"
#include "launch/task.h"

namespace tessera::launch {

Command add_translate_command(CLI::App& parent) {
  struct Options {
    std::string checkpoint, input, output, vocab;
    std::int64_t beam = 0, batch = 0;
    double length_penalty = -1;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "translate", "Translate sentences (one per line, from a file or stdin) with a trained checkpoint");
  cmd->add_option("--checkpoint", opt->checkpoint,
                  "Checkpoint written by tessera train (e.g. checkpoints/run/model.h5)")
      ->required();
  cmd->add_option("--input,-i", opt->input, "Source sentences, one per line (default: stdin)");
  cmd->add_option("--output,-o", opt->output, "Where to write translations (default: stdout)");
  cmd->add_option("--vocab", opt->vocab, "SentencePiece model (default: the one the checkpoint's run used)");
  cmd->add_option("--beam", opt->beam, "Beam size (default: decode.beam of the checkpoint's config)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--length-penalty", opt->length_penalty, "Length penalty alpha (default: from the config)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--batch", opt->batch, "Sentences decoded together (default: from the config)")
      ->check(CLI::Range(1, 100000));
  return {cmd, [opt] {
            const io::WeightsFile w = io::load_weights(opt->checkpoint);
            std::vector<std::string> overrides;
            if (!opt->vocab.empty()) overrides.push_back("data.vocab=" + opt->vocab);
            const io::Config cfg = io::Config::parse(tessera_schema(), w.config_yaml, opt->checkpoint, overrides);
            // The vocabulary: --vocab, the config's, or the one beside the checkpoint.
            std::string vpath = vocab_path(cfg);
            const auto beside = std::filesystem::path(opt->checkpoint).parent_path() / "vocab.model";
            if (opt->vocab.empty() && !std::filesystem::exists(vpath) && std::filesystem::exists(beside))
              vpath = beside.string();
            const TextCodec codec = cfg.string("data.task") == "translation"
                                        ? TextCodec::sentencepiece(data::Vocab::load(vpath))
                                        : load_codec(cfg);
            models::Transformer model(model_config(cfg, codec.size(), codec.size()), 0);
            std::vector<ag::Var> params = model.parameters();
            io::assign_weights(w, opt->checkpoint, params);

            std::vector<std::string> lines;
            if (opt->input.empty()) {
              for (std::string line; std::getline(std::cin, line);) {
                if (!line.empty() && line.back() == '\r') line.pop_back();
                lines.push_back(line);
              }
            } else {
              lines = data::read_lines(opt->input);
            }
            models::DecodeOptions dec = decode_options(cfg);
            if (opt->beam > 0) dec.beam = opt->beam;
            if (opt->length_penalty >= 0) dec.length_penalty = opt->length_penalty;
            const std::int64_t batch = opt->batch > 0 ? opt->batch : cfg.integer("decode.batch_sentences");
            std::vector<std::vector<std::int32_t>> sources;
            for (const auto& l : lines) {
              auto ids = codec.encode(l);
              // Longer inputs than the positional table allows are cut (and said so) rather than failing the batch.
              const auto limit = static_cast<std::size_t>(cfg.integer("model.max_positions") - 1);
              if (ids.size() > limit) {
                fmt::print(stderr, "translate: line {} has {} tokens; keeping the first {}\n", sources.size() + 1,
                           ids.size(), limit);
                ids.resize(limit);
              }
              sources.push_back(std::move(ids));
            }
            const models::TokenRows hyps = translate_ids(model, sources, dec, batch);
            std::ofstream file;
            if (!opt->output.empty()) {
              file.open(opt->output);
              TESSERA_CHECK(file.good(), "translate: cannot write '{}'", opt->output);
            }
            std::ostream& out = opt->output.empty() ? std::cout : file;
            for (const auto& h : hyps) out << codec.decode(h) << '\n';
            out.flush();
            TESSERA_CHECK(out.good(), "translate: writing the translations failed");
            return 0;
          }};
}

}  // namespace tessera::launch
