// `tessera vocab`: trains a SentencePiece subword vocabulary (joint when given several languages).
#include <fmt/core.h>

#include <memory>

#include "data/vocab.h"
#include "launch/commands.h"

namespace tessera::launch {

Command add_vocab_command(CLI::App& parent) {
  auto opt = std::make_shared<data::VocabTrainOptions>();
  CLI::App* cmd =
      parent.add_subcommand("vocab", "Train a SentencePiece subword vocabulary (ids 0-3: pad, unk, bos, eos)");
  cmd->add_option("--input", opt->inputs, "Text file, one sentence a line (.gz allowed); repeat for a joint vocabulary")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--model-prefix", opt->model_prefix, "Writes PREFIX.model and PREFIX.vocab")->required();
  cmd->add_option("--vocab-size", opt->vocab_size, "Number of pieces, the four special ones included")
      ->check(CLI::Range(std::int64_t{5}, std::int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--model-type", opt->model_type, "Segmentation algorithm")
      ->check(CLI::IsMember({"bpe", "unigram"}))
      ->capture_default_str();
  cmd->add_option("--character-coverage", opt->character_coverage,
                  "Share of characters covered by the vocabulary (rarer ones map to <unk>)")
      ->check(finite_range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--input-sentence-size", opt->input_sentence_size,
                  "Train on at most this many sentences, sampled with --seed")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the sentence sample")->capture_default_str();
  return {cmd,
          [opt]() {
            const data::Vocab vocab = data::Vocab::train(*opt);
            fmt::print("wrote {}.model and {}.vocab (vocabulary size {}, model type {})\n", opt->model_prefix,
                       opt->model_prefix, vocab.size(), opt->model_type);
            return 0;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
