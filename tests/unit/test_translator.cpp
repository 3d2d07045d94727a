// A checkpoint carries its run's vocabularies: translating needs nothing else, a vocabulary given
// as well must be the same, a resume refuses vocabulary files that were replaced, and checkpoints
// written before they held vocabularies still find the files.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "data/synthetic.h"
#include "data/task_data.h"
#include "data/vocab.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "models/from_config.h"
#include "models/transformer.h"
#include "models/translator.h"
#include "unit/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

const std::string kCorpus = std::string(TESSERA_TEST_DATA_DIR) + "/corpus/multi30k_300";

// Synthetic tasks' symbol numbers: <unk> (which a weakly trained model can output) is shown, not
// dropped in silence; pad, bos and eos are no output.
TEST(SymbolCodec, UnknownIsShownOtherSpecialIdsAreNot) {
  const data::TextCodec codec = data::TextCodec::symbols(20);
  EXPECT_EQ(codec.decode(codec.encode("7 0 19")), "7 0 19");
  EXPECT_EQ(codec.decode({data::kFirstSymbol + 7, data::kUnkId, data::kFirstSymbol, data::kPadId, data::kEosId}),
            "7 <unk> 0");
  EXPECT_EQ(codec.decode({data::kUnkId}), "<unk>");
}

class CheckpointVocabularies : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(path("run")); }
  std::string path(const std::string& name) const { return dir_.path(name); }

  // A SentencePiece model of 120 pieces trained on one side of the test corpus into `prefix`.
  data::Vocab train_vocab(const std::string& side, const std::string& prefix) const {
    data::VocabTrainOptions o;
    o.inputs = {kCorpus + "." + side};
    o.model_prefix = path(prefix);
    o.vocab_size = 120;
    return data::Vocab::train(o);
  }

  // A small untrained translation model's weights-only checkpoint at run/model.h5, its joint
  // vocabulary (trained on English) at run/vocab.model; with `store`, the checkpoint holds it.
  std::string write_model(bool store) const {
    const data::Vocab vocab = train_vocab("en", "run/vocab");
    const io::RunConfig cfg =
        io::RunConfig::parse("", "test",
                             {"data.task=translation", "output.dir=" + path("run"), "model.layers=1",
                              "model.d_model=16", "model.d_ff=32", "model.heads=2"});
    const models::Transformer model(models::model_config(cfg, vocab.size(), vocab.size()), 3);
    io::Checkpoint c;
    c.config_yaml = cfg.to_yaml(false);
    c.model = io::named_values(model.parameters());
    if (store) c.vocabularies = {{"joint", vocab.serialized()}};
    io::save_checkpoint(path("run/model.h5"), c);
    return path("run/model.h5");
  }

  static std::vector<std::string> translate(const models::Translator& t) {
    models::DecodeOptions opt;
    opt.beam = 1;
    opt.max_extra_len = 3;
    return t.translate(t.encode({"A man is walking.", "Two dogs play in the snow."}), opt, 2, nullptr);
  }

  testing::TempDir dir_;
};

TEST_F(CheckpointVocabularies, TheCheckpointTranslatesWithoutTheVocabularyFiles) {
  const std::string ckpt = write_model(/*store=*/true);
  const std::vector<std::string> with_files = translate(models::Translator(ckpt, "", ""));
  ASSERT_FALSE(with_files[0].empty() || with_files[1].empty()) << "nothing to compare: the checks below prove nothing";
  fs::copy_file(path("run/vocab.model"), path("copy.model"));
  fs::remove(path("run/vocab.model"));
  EXPECT_EQ(translate(models::Translator(ckpt, "", "")), with_files);
  // Another vocabulary where the run wrote its own changes nothing: the stored one is used.
  train_vocab("de", "run/vocab");
  EXPECT_EQ(translate(models::Translator(ckpt, "", "")), with_files);
  // Named explicitly, a vocabulary must be the stored one: a German one of the same size would
  // give other ids to the same text without a word.
  EXPECT_EQ(error_of([&] { models::Translator(ckpt, path("run/vocab.model"), ""); }),
            fmt::format("--vocab '{}' is not the vocabulary checkpoint '{}' holds (the one it was trained with); "
                        "leave --vocab out",
                        path("run/vocab.model"), ckpt));
  EXPECT_EQ(translate(models::Translator(ckpt, path("copy.model"), "")), with_files);
  // A joint vocabulary is both sides': --vocab-tgt names it too.
  EXPECT_EQ(error_of([&] { models::Translator(ckpt, "", path("run/vocab.model")); }),
            fmt::format("--vocab-tgt '{}' is not the vocabulary checkpoint '{}' holds (the one it was trained with); "
                        "leave --vocab-tgt out",
                        path("run/vocab.model"), ckpt));
  EXPECT_EQ(translate(models::Translator(ckpt, path("copy.model"), path("copy.model"))), with_files);
}

// An ensemble's members must hold the vocabularies of the first checkpoint: another one (of the
// same size: nothing else would tell) or none is refused; the same model twice translates as alone.
TEST_F(CheckpointVocabularies, EnsembleMembersShareTheVocabularies) {
  const std::string ckpt = write_model(/*store=*/true);
  const models::Translator alone(ckpt, "", "");
  EXPECT_TRUE(alone.vocabulary_files().empty());  // it read the stored ones
  models::Translator twice(ckpt, "", "");
  fs::copy_file(ckpt, path("copy.h5"));
  twice.add_ensemble_member(path("copy.h5"));
  EXPECT_EQ(translate(twice), translate(alone));
  io::Checkpoint other = io::load_checkpoint(ckpt, /*weights_only=*/true);
  other.vocabularies = {{"joint", train_vocab("de", "de").serialized()}};
  io::save_checkpoint(path("other.h5"), other);
  EXPECT_EQ(error_of([&] { twice.add_ensemble_member(path("other.h5")); }),
            fmt::format("ensemble: checkpoint '{}' was trained with other vocabularies (/vocab) than '{}': the models "
                        "of an ensemble must share them",
                        path("other.h5"), ckpt));
  other.vocabularies.clear();
  io::save_checkpoint(path("none.h5"), other);
  EXPECT_EQ(
      error_of([&] { twice.add_ensemble_member(path("none.h5")); }),
      fmt::format("ensemble: checkpoint '{}' holds no vocabulary (written by an earlier build): an ensemble needs "
                  "checkpoints that hold theirs, to tell that they share one",
                  path("none.h5")));
  EXPECT_EQ(translate(twice), translate(alone));  // the refused ones were not added
}

// Checkpoints written before they held vocabularies: the files, as before.
TEST_F(CheckpointVocabularies, WithoutStoredOnesTheFilesAreUsed) {
  const std::string ckpt = write_model(/*store=*/false);
  const models::Translator first(ckpt, "", "");
  // translate -o refuses to write over these (it would overwrite the run's vocabulary).
  EXPECT_EQ(first.vocabulary_files(), std::vector<std::string>{path("run/vocab.model")});
  const std::vector<std::string> with_files = translate(first);
  fs::rename(path("run"), path("moved"));  // found beside the checkpoint
  const std::string moved = path("moved/model.h5");
  EXPECT_EQ(translate(models::Translator(moved, "", "")), with_files);
  fs::create_directories(path("run"));
  train_vocab("de", "run/vocab");  // another one where the run wrote its own: which is meant is unknowable
  EXPECT_EQ(error_of([&] { models::Translator(moved, "", ""); }),
            fmt::format("checkpoint '{}': two different vocabularies could be the one its run trained: '{}' (where "
                        "the run wrote it) and '{}' (beside the checkpoint); name the right one with --vocab",
                        moved, path("run/vocab.model"), path("moved/vocab.model")));
  EXPECT_EQ(translate(models::Translator(moved, path("moved/vocab.model"), "")), with_files);
}

TEST_F(CheckpointVocabularies, ResumeRefusesReplacedVocabularyFiles) {
  const data::Vocab en = train_vocab("en", "en"), de = train_vocab("de", "de");
  const data::VocabPaths files{path("run/vocab.src.model"), path("run/vocab.tgt.model")};
  const std::map<std::string, std::string> stored = {{"src", en.serialized()}, {"tgt", de.serialized()}};
  EXPECT_EQ(error_of([&] { data::check_checkpoint_vocabularies(stored, stored, "c.h5", files); }), "(no error)");
  EXPECT_EQ(error_of([&] { data::check_checkpoint_vocabularies({}, stored, "c.h5", files); }), "(no error)");
  EXPECT_EQ(error_of([&] {
              data::check_checkpoint_vocabularies(stored, {{"src", en.serialized()}, {"tgt", en.serialized()}}, "c.h5",
                                                  files);
            }),
            fmt::format("cannot resume from 'c.h5': vocabulary '{}' is not the one it was trained with (stored in it "
                        "as /vocab/tgt); the run would go on with other token ids. Put the run's own back (tessera "
                        "vocab --from-checkpoint writes it) or train into a new output.dir",
                        files.tgt));
  EXPECT_EQ(error_of([&] {
              data::check_checkpoint_vocabularies(stored, {{"joint", en.serialized()}}, "c.h5", files);
            }),
            "cannot resume from 'c.h5': it was trained with one vocabulary per language, the config now gives one "
            "joint vocabulary (data.joint_vocab)");
}

}  // namespace
}  // namespace tessera
