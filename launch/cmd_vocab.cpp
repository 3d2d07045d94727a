// `tessera vocab`: trains a SentencePiece subword vocabulary (joint when given several languages),
// or writes out the ones a checkpoint holds.
#include <fmt/core.h>

#include <filesystem>
#include <limits>
#include <memory>

#include "common/error.h"
#include "data/vocab.h"
#include "io/checkpoint.h"
#include "launch/commands.h"

namespace tessera::launch {
namespace {

// PREFIX.model (a joint vocabulary), or PREFIX.src.model and PREFIX.tgt.model, from the checkpoint.
void write_checkpoint_vocabularies(const std::string& checkpoint, const std::string& prefix) {
  const std::map<std::string, std::string> stored = io::load_vocabularies(checkpoint);
  if (stored.empty())
    fail("checkpoint '{}' holds no vocabulary (a synthetic task's, or written before checkpoints held them)",
         checkpoint);
  const auto path_of = [&](const std::string& name) { return prefix + (name == "joint" ? "" : "." + name) + ".model"; };
  // Before any is written: the checkpoint itself (another name, a link) would be replaced by a vocabulary.
  for (const auto& [name, bytes] : stored) {
    std::error_code ec;
    if (std::filesystem::equivalent(path_of(name), checkpoint, ec))
      fail("vocab: the output '{}' is the checkpoint '{}': give another --model-prefix", path_of(name), checkpoint);
    check_can_create("vocab", path_of(name));
  }
  for (const auto& [name, bytes] : stored) {
    const data::Vocab vocab = data::Vocab::from_serialized(bytes, checkpoint + ":/vocab/" + name);
    const std::string path = path_of(name);
    data::Vocab::write_model_file(path, bytes);
    fmt::print("wrote {} (vocabulary size {}) from {}:/vocab/{}\n", path, vocab.size(), checkpoint, name);
  }
}

}  // namespace

Command add_vocab_command(CLI::App& parent) {
  auto opt = std::make_shared<data::VocabTrainOptions>();
  CLI::App* cmd =
      parent.add_subcommand("vocab", "Train a SentencePiece subword vocabulary (ids 0-3: pad, unk, bos, eos)");
  auto checkpoint = std::make_shared<std::string>();
  CLI::Option_group* source = cmd->add_option_group("source", "Train on text, or take a checkpoint's (one of them)");
  source
      ->add_option("--input", opt->inputs,
                   "Text file, one sentence a line (.gz allowed); repeat for a joint vocabulary")
      ->check(CLI::ExistingFile);
  CLI::Option* from =
      source
          ->add_option("--from-checkpoint", *checkpoint,
                       "Instead of training: write the vocabularies a checkpoint holds, as PREFIX.model (joint) or "
                       "PREFIX.src.model and PREFIX.tgt.model")
          ->check(CLI::ExistingFile);
  source->require_option(1);
  cmd->add_option("--model-prefix", opt->model_prefix,
                  "Writes PREFIX.model and PREFIX.vocab (with --from-checkpoint: the .model files)")
      ->required()
      ->check(
          [](const std::string& prefix) -> std::string {
            // "dir/" would write the hidden files dir/.model and dir/.vocab.
            if (prefix.empty() || prefix.back() == '/')
              return "'" + prefix + "' names no file: give a folder and a name, e.g. " + prefix + "sp";
            return "";
          },
          "PREFIX");
  add_whole_number_option(cmd, "--vocab-size", opt->vocab_size, 16, 1000000,  // as data.vocab_size
                          "Number of pieces, the four special ones included")
      ->excludes(from);
  cmd->add_option("--model-type", opt->model_type, "Segmentation algorithm")
      ->check(CLI::IsMember({"bpe", "unigram"}))
      ->capture_default_str()
      ->excludes(from);
  cmd->add_option("--character-coverage", opt->character_coverage,
                  "Share of characters covered by the vocabulary (rarer ones map to <unk>)")
      ->check(finite_range(0.98, 1.0))  // SentencePiece's own range
      ->capture_default_str()
      ->excludes(from);
  add_whole_number_option(cmd, "--input-sentence-size", opt->input_sentence_size, 1,
                          std::numeric_limits<std::int64_t>::max(),
                          "Train on at most this many sentences, sampled with --seed")
      ->excludes(from);
  add_whole_number_option(cmd, "--seed", opt->seed, 0, std::numeric_limits<std::int64_t>::max(),
                          "Seed of the sentence sample")
      ->excludes(from);
  return {cmd,
          [opt, checkpoint]() {
            if (!checkpoint->empty()) {
              write_checkpoint_vocabularies(*checkpoint, opt->model_prefix);
              return 0;
            }
            const data::Vocab vocab = data::Vocab::train(*opt);
            fmt::print("wrote {}.model and {}.vocab (vocabulary size {}, model type {})\n", opt->model_prefix,
                       opt->model_prefix, vocab.size(), opt->model_type);
            return 0;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
