// Data module: corpus reading, SentencePiece vocabulary, token-count batching, synthetic tasks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/error.h"
#include "data/batching.h"
#include "data/corpus.h"
#include "data/example_file.h"
#include "data/examples.h"
#include "data/random.h"
#include "data/synthetic.h"
#include "data/vocab.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::data;

namespace {

const std::string kCorpusDir = std::string(TESSERA_TEST_DATA_DIR) + "/corpus";

using tessera::testing::error_of;
using tessera::testing::TempDir;

std::vector<std::int32_t> row(const Tensor& t, std::int64_t r) {
  const std::int64_t cols = t.size(1);
  const std::int32_t* p = t.data<std::int32_t>() + r * cols;
  return {p, p + cols};
}

std::vector<std::vector<std::int64_t>> epoch_batches(Batcher& b) {
  std::vector<std::vector<std::int64_t>> out;
  Batch batch;
  while (b.next(batch)) out.push_back(batch.indices);
  return out;
}

// Examples with varied lengths (1..60 source, correlated target) for the batcher tests.
ExampleSet varied_examples(std::int64_t n) {
  std::vector<Example> ex = make_synthetic(SyntheticTask::copy, n, 1, 60, 50, 7).to_vector();
  for (std::size_t i = 0; i < ex.size(); ++i) ex[i].tgt.resize(ex[i].tgt.size() + i % 5, 9);
  return ExampleSet(ex);
}

}  // namespace

// ---------------------------------------------------------------- corpus

TEST(Corpus, ReadsPlainFixture) {
  const auto lines = read_lines(kCorpusDir + "/tiny.txt");
  const std::vector<std::string> want = {"alpha", "", "beta gamma", "\xC3\x84pfel und Birnen",
                                         "last line without newline"};
  EXPECT_EQ(lines, want);
}

TEST(Corpus, ReadsGzipFixtureWithCrlf) {
  const auto lines = read_lines(kCorpusDir + "/tiny.txt.gz");
  const std::vector<std::string> want = {"first line", "second line", "",
                                         "fourth: Gr\xC3\xBC\xC3\x9F"
                                         "e",
                                         "no newline at end"};
  EXPECT_EQ(lines, want);
}

TEST(Corpus, CrlfEmptyLinesAndFinalLine) {
  TempDir dir;
  EXPECT_EQ(read_lines(dir.file("a.txt", "a\r\n\r\nb\r\nc")), (std::vector<std::string>{"a", "", "b", "c"}));
  EXPECT_EQ(read_lines(dir.file("b.txt", "a\n\n")), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(read_lines(dir.file("c.txt", "")), std::vector<std::string>{});
  EXPECT_EQ(read_lines(dir.file("d.txt", "\n")), std::vector<std::string>{""});
  // Only the line end is stripped: a "\r" inside a line stays.
  EXPECT_EQ(read_lines(dir.file("e.txt", "x\ry\r\n")), std::vector<std::string>{"x\ry"});
}

TEST(Corpus, LongLinesAcrossBufferBoundaries) {
  TempDir dir;
  std::string a(200000, 'a'), b(70000, 'b');
  a.replace(65535, 2, "\xC3\xA9");  // a two-byte character split across the first 64 KiB read
  const auto lines = read_lines(dir.file("long.txt", a + "\n" + b + "\r\n" + "z"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], a);
  EXPECT_EQ(lines[1], b);
  EXPECT_EQ(lines[2], "z");
}

// A line longer than 1 MiB (a file of CR-ended lines, /dev/zero) is an error naming it, before it
// fills the memory; one of exactly 1 MiB (and its "\r") is read.
TEST(Corpus, LinesLongerThanTheLimitAreNamed) {
  TempDir dir;
  const std::string longest(kMaxLineBytes, 'a');
  const auto lines = read_lines(dir.file("longest.txt", "x\n" + longest + "\r\n"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], longest);
  // The same line with its "\r" at the end of one 64 KiB read and the "\n" at the start of the next.
  const std::string first(65534, 'b');
  const auto split = read_lines(dir.file("split.txt", first + "\n" + longest + "\r\n"));
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[1], longest);
  const std::string r = dir.file("one_more.txt", first + "\n" + longest + "a\n");
  EXPECT_EQ(error_of([&] { read_lines(r); }),
            fmt::format("{}:2: a line longer than 1 MiB (are its lines ended by CR alone? is it text at all?)", r));
  const std::string p = dir.file("cr.txt", "x\n" + std::string(kMaxLineBytes / 4, 'a') + "\r" + longest + "\n");
  EXPECT_EQ(error_of([&] { read_lines(p); }),
            fmt::format("{}:2: a line longer than 1 MiB (are its lines ended by CR alone? is it text at all?)", p));
  const std::string q = dir.file("no_newline.txt", longest + "a");  // the end of the file ends it
  EXPECT_EQ(error_of([&] { read_lines(q); }),
            fmt::format("{}:1: a line longer than 1 MiB (are its lines ended by CR alone? is it text at all?)", q));
  EXPECT_EQ(error_of([] { read_lines("/dev/zero"); }),
            "/dev/zero:1: a line longer than 1 MiB (are its lines ended by CR alone? is it text at all?)");
}

TEST(Corpus, MissingFileNamesIt) {
  EXPECT_EQ(error_of([] { read_lines("/nonexistent/train.en"); }),
            "cannot read '/nonexistent/train.en': No such file or directory");
  EXPECT_EQ(error_of([] { read_lines("/nonexistent/train.en.gz"); }),
            "cannot read '/nonexistent/train.en.gz': No such file or directory");
}

TEST(Corpus, DirectoryIsNotAFile) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { read_lines(dir.path("")); }), fmt::format("cannot read '{}': Is a directory", dir.path("")));
}

TEST(Corpus, TruncatedGzipIsAnError) {
  std::ifstream in(kCorpusDir + "/tiny.txt.gz", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 30u);
  TempDir dir;
  const std::string p = dir.file("cut.txt.gz", bytes.substr(0, bytes.size() - 12));
  EXPECT_EQ(error_of([&] { read_lines(p); }), fmt::format("cannot read '{}': unexpected end of file", p));
}

TEST(Corpus, FindInvalidUtf8) {
  EXPECT_EQ(find_invalid_utf8(""), -1);
  EXPECT_EQ(find_invalid_utf8("plain ascii"), -1);
  EXPECT_EQ(find_invalid_utf8("Gr\xC3\xBC\xC3\x9F"
                              "e \xE2\x82\xAC \xF0\x9F\x98\x80"),
            -1);                                         // ü ß € 😀
  EXPECT_EQ(find_invalid_utf8("\xED\x9F\xBF"), -1);      // U+D7FF
  EXPECT_EQ(find_invalid_utf8("\xEE\x80\x80"), -1);      // U+E000
  EXPECT_EQ(find_invalid_utf8("\xF4\x8F\xBF\xBF"), -1);  // U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2);             // lone continuation byte
  EXPECT_EQ(find_invalid_utf8("a\xC0\xAF"), 1);          // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xC1\xBF"), 0);           // overlong
  EXPECT_EQ(find_invalid_utf8("xy\xE0\x80\xAF"), 2);     // overlong, three bytes
  EXPECT_EQ(find_invalid_utf8("\xF0\x80\x80\xAF"), 0);   // overlong, four bytes
  EXPECT_EQ(find_invalid_utf8("ok \xED\xA0\x80"), 3);    // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xED\xBF\xBF"), 0);       // surrogate U+DFFF
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0);   // U+110000
  EXPECT_EQ(find_invalid_utf8("\xF5\x80\x80\x80"), 0);   // F5 never starts a character
  EXPECT_EQ(find_invalid_utf8("\xFF"), 0);
  EXPECT_EQ(find_invalid_utf8("abc\xE2\x82"), 3);   // truncated at the end
  EXPECT_EQ(find_invalid_utf8("\xE2\x82z"), 0);     // truncated before ASCII
  EXPECT_EQ(find_invalid_utf8("\xC3\xA9\xC3"), 2);  // valid, then truncated
}

TEST(Corpus, InvalidUtf8NamesFileLineAndByte) {
  TempDir dir;
  const std::string p = dir.file("train.de", "gut\nauch gut\r\nok\nbad \xED\xA0\x80 line\n");
  EXPECT_EQ(error_of([&] { read_lines(p); }), fmt::format("{}:4: not UTF-8 text: byte 5 of the line is 0xed", p));
  const std::string q = dir.file("trunc.de", "\xC3\xA9\xC3");
  EXPECT_EQ(error_of([&] { read_lines(q); }), fmt::format("{}:1: not UTF-8 text: byte 3 of the line is 0xc3", q));
  const std::string r = dir.file("overlong.de", "\n\nab\xC0\x80");
  EXPECT_EQ(error_of([&] { read_lines(r); }), fmt::format("{}:3: not UTF-8 text: byte 3 of the line is 0xc0", r));
  // gzip data under a name without .gz: said to look like it.
  const std::string z = dir.file("train.txt", std::string("\x1f\x8b\x08\x00\x00", 5));
  EXPECT_EQ(
      error_of([&] { read_lines(z); }),
      fmt::format("{}:1: not UTF-8 text: byte 2 of the line is 0x8b (it starts as gzip data does: a compressed file "
                  "is read as such when its name ends in .gz)",
                  z));
}

TEST(Corpus, ReadParallel) {
  const ParallelText t = read_parallel(kCorpusDir + "/multi30k_300.en", kCorpusDir + "/multi30k_300.de");
  ASSERT_EQ(t.src.size(), 300u);
  ASSERT_EQ(t.tgt.size(), 300u);
  EXPECT_EQ(t.src[0], "Two young, White males are outside near many bushes.");
  EXPECT_EQ(t.tgt[0],
            "Zwei junge wei\xC3\x9F"
            "e M\xC3\xA4nner sind im Freien in der N\xC3\xA4he vieler B\xC3\xBCsche.");
}

TEST(Corpus, ReadParallelMismatchedCounts) {
  TempDir dir;
  const std::string en = dir.file("train.en", "a\nb\nc\n");
  const std::string de = dir.file("train.de", "x\ny\n");
  EXPECT_EQ(error_of([&] { read_parallel(en, de); }), fmt::format("{} has 3 lines but {} has 2 lines", en, de));
  EXPECT_EQ(error_of([&] { read_parallel(de, en); }), fmt::format("{} has 2 lines but {} has 3 lines", de, en));
}

// Streamed in chunks: the same pairs as read whole; a line count that differs is found when the
// shorter file ends, and named with both full counts (not the lines read so far).
TEST(Corpus, ParallelReaderChunks) {
  const std::string en = kCorpusDir + "/multi30k_300.en", de = kCorpusDir + "/multi30k_300.de";
  const ParallelText whole = read_parallel(en, de);
  for (const std::int64_t size : {1, 7, 299, 300, 1000}) {
    ParallelReader reader(en, de);
    ParallelText chunk, joined;
    std::int64_t chunks = 0;
    while (reader.next(chunk, size)) {
      EXPECT_LE(static_cast<std::int64_t>(chunk.src.size()), size);
      EXPECT_EQ(chunk.src.size(), chunk.tgt.size());
      joined.src.insert(joined.src.end(), chunk.src.begin(), chunk.src.end());
      joined.tgt.insert(joined.tgt.end(), chunk.tgt.begin(), chunk.tgt.end());
      ++chunks;
    }
    EXPECT_EQ(chunks, (300 + size - 1) / size) << size;
    EXPECT_TRUE(chunk.src.empty());
    EXPECT_EQ(joined.src, whole.src) << size;
    EXPECT_EQ(joined.tgt, whole.tgt) << size;
  }
  TempDir dir;
  const std::string five = dir.file("five.en", "1\n2\n3\n4\n5\n");
  const std::string two = dir.file("two.de", "x\ny\n");
  ParallelReader reader(five, two);
  ParallelText chunk;
  EXPECT_TRUE(reader.next(chunk, 1));
  EXPECT_EQ(error_of([&] { reader.next(chunk, 1000); }), fmt::format("{} has 5 lines but {} has 2 lines", five, two));
  EXPECT_EQ(error_of([&] { ParallelReader(two, five).skip_rest(); }),
            fmt::format("{} has 2 lines but {} has 5 lines", two, five));
  ParallelReader partly(en, de);
  EXPECT_TRUE(partly.next(chunk, 100));
  EXPECT_EQ(partly.skip_rest(), 200);
  EXPECT_EQ(error_of([&] { ParallelReader(two, dir.path("none.en")); }),
            fmt::format("cannot read '{}': No such file or directory", dir.path("none.en")));
}

// The fingerprint an encoded copy is checked against: the same for the same pairs however read
// (in chunks or skipped through, CRLF or LF), different for any change to a pair or their order.
TEST(Corpus, ParallelReaderFingerprint) {
  TempDir dir;
  const auto fingerprint = [&](const std::string& en, const std::string& de) {
    ParallelReader reader(dir.file("f.en", en), dir.file("f.de", de));
    reader.skip_rest();
    return reader.fingerprint();
  };
  const std::uint64_t base = fingerprint("a b\nc\n", "x\ny z\n");
  EXPECT_EQ(fingerprint("a b\r\nc\r\n", "x\r\ny z"), base);
  EXPECT_NE(fingerprint("a b\nd\n", "x\ny z\n"), base);      // one letter
  EXPECT_NE(fingerprint("c\na b\n", "y z\nx\n"), base);      // the pairs' order
  EXPECT_NE(fingerprint("a\nb c\n", "x\ny z\n"), base);      // a word moved to the next line
  EXPECT_NE(fingerprint("x\ny z\n", "a b\nc\n"), base);      // the sides swapped
  EXPECT_NE(fingerprint("a b\nc\n\n", "x\ny z\n\n"), base);  // a pair of empty lines more
  EXPECT_NE(fingerprint("", ""), base);

  const std::string en = kCorpusDir + "/multi30k_300.en", de = kCorpusDir + "/multi30k_300.de";
  ParallelReader whole(en, de), chunked(en, de);
  whole.skip_rest();
  ParallelText chunk;
  while (chunked.next(chunk, 7)) {
  }
  EXPECT_EQ(chunked.fingerprint(), whole.fingerprint());
}

// ---------------------------------------------------------------- vocab

namespace {

// One small joint BPE model shared by the Vocab tests (training takes a moment).
// A folder's file names, sorted.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class VocabTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera_vocab_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    VocabTrainOptions opt;
    opt.inputs = {kCorpusDir + "/multi30k_300.en", kCorpusDir + "/multi30k_300.de"};
    opt.model_prefix = (dir_ / "bpe").string();
    opt.vocab_size = 200;
    opt.model_type = "bpe";
    vocab_ = new Vocab(Vocab::train(opt));
  }
  static void TearDownTestSuite() {
    delete vocab_;
    vocab_ = nullptr;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static fs::path dir_;
  static Vocab* vocab_;
};
fs::path VocabTest::dir_;
Vocab* VocabTest::vocab_ = nullptr;

}  // namespace

TEST_F(VocabTest, TrainsWithRequestedSizeAndFiles) {
  EXPECT_EQ(vocab_->size(), 200);
  EXPECT_TRUE(fs::exists(dir_ / "bpe.model"));
  EXPECT_TRUE(fs::exists(dir_ / "bpe.vocab"));
  EXPECT_EQ(vocab_->path(), (dir_ / "bpe.model").string());
  // Written under a temporary prefix and renamed: nothing else is left in the folder.
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"bpe.model", "bpe.vocab"}));
}

TEST_F(VocabTest, SpecialIds) {
  std::ifstream in(dir_ / "bpe.vocab");
  std::vector<std::string> pieces;
  for (std::string line; std::getline(in, line) && pieces.size() < 4;)
    pieces.push_back(line.substr(0, line.find('\t')));
  EXPECT_EQ(pieces, (std::vector<std::string>{"<pad>", "<unk>", "<s>", "</s>"}));
  // Encoding adds neither bos nor eos, and ordinary text never yields pad/bos/eos.
  const auto ids = vocab_->encode("A man in a blue shirt.");
  ASSERT_FALSE(ids.empty());
  for (const auto id : ids) {
    EXPECT_GE(id, 4);
    EXPECT_LT(id, 200);
  }
  // Characters never seen in training map to <unk>.
  const auto unk = vocab_->encode("\xE6\xBC\xA2");  // 漢
  EXPECT_NE(std::find(unk.begin(), unk.end(), kUnkId), unk.end());
}

TEST_F(VocabTest, RoundTripsCorpusSentences) {
  const auto en = read_lines(kCorpusDir + "/multi30k_300.en");
  const auto de = read_lines(kCorpusDir + "/multi30k_300.de");
  for (const auto* lines : {&en, &de})
    for (std::size_t i = 0; i < lines->size(); i += 37) {
      const auto ids = vocab_->encode((*lines)[i]);
      EXPECT_LT(ids.size(), (*lines)[i].size()) << (*lines)[i];  // subwords, not only characters
      EXPECT_EQ(vocab_->decode(ids), (*lines)[i]);
    }
  EXPECT_EQ(vocab_->decode(vocab_->encode("")), "");
}

TEST_F(VocabTest, DecodeSkipsPadBosEos) {
  const std::string s = "Zwei junge Frauen sitzen im Gras.";
  auto ids = vocab_->encode(s);
  ids.insert(ids.begin(), kBosId);
  ids.push_back(kEosId);
  ids.push_back(kPadId);
  ids.push_back(kPadId);
  EXPECT_EQ(vocab_->decode(ids), s);
}

TEST_F(VocabTest, DecodeOutOfRangeIdNamesIt) {
  EXPECT_NE(error_of([&] { vocab_->decode({5, 200}); }).find("id 200"), std::string::npos);
  EXPECT_NE(error_of([&] { vocab_->decode({-1}); }).find("id -1"), std::string::npos);
}

TEST_F(VocabTest, LoadsSavedModel) {
  const Vocab again = Vocab::load((dir_ / "bpe.model").string());
  EXPECT_EQ(again.size(), 200);
  const std::string s = "Ein Hund rennt durch den Schnee.";
  EXPECT_EQ(again.encode(s), vocab_->encode(s));
}

TEST_F(VocabTest, TrainingIsDeterministicAndReadsGzip) {
  // The same corpus through a .gz file, sampled down to 250 sentences twice with one seed.
  TempDir dir;
  VocabTrainOptions opt;
  opt.inputs = {kCorpusDir + "/multi30k_300.en", kCorpusDir + "/tiny.txt.gz"};
  opt.vocab_size = 120;
  opt.input_sentence_size = 250;
  opt.seed = 3;
  opt.model_prefix = dir.path("a");
  const Vocab a = Vocab::train(opt);
  opt.model_prefix = dir.path("b");
  const Vocab b = Vocab::train(opt);
  std::ifstream fa(dir.path("a.vocab")), fb(dir.path("b.vocab"));
  const std::string va((std::istreambuf_iterator<char>(fa)), {}), vb((std::istreambuf_iterator<char>(fb)), {});
  EXPECT_FALSE(va.empty());
  EXPECT_EQ(va, vb);
  EXPECT_EQ(a.size(), 120);
  // The model files too, byte for byte, though written under other names (they record no path):
  // a retrained vocabulary counts as the same one for --vocab, average and the encoded-pairs cache.
  std::ifstream ma(dir.path("a.model"), std::ios::binary), mb(dir.path("b.model"), std::ios::binary);
  const std::string model_a((std::istreambuf_iterator<char>(ma)), {}),
      model_b((std::istreambuf_iterator<char>(mb)), {});
  EXPECT_FALSE(model_a.empty());
  EXPECT_EQ(model_a, model_b);
  EXPECT_EQ(model_a, a.serialized());
}

// Outputs that would destroy an input, or that a folder stands in the place of, are refused before
// training, and nothing is left behind.
TEST(Vocab, OutputsThatAreInputsOrFoldersAreRefused) {
  TempDir dir;
  VocabTrainOptions opt;
  opt.vocab_size = 100;
  const std::string text = dir.file("in.model", "a man in a blue shirt\nzwei junge frauen\n");
  opt.inputs = {text};
  opt.model_prefix = dir.path("in");
  EXPECT_EQ(error_of([&] { Vocab::train(opt); }),
            fmt::format("vocab: the output '{}' is the input '{}': give another --model-prefix", text, text));
  std::ifstream kept(text);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(kept)), {}), "a man in a blue shirt\nzwei junge frauen\n");
  opt.inputs = {kCorpusDir + "/multi30k_300.en"};
  fs::create_directories(dir.path("dm.model"));
  opt.model_prefix = dir.path("dm");
  EXPECT_EQ(error_of([&] { Vocab::train(opt); }),
            fmt::format("vocab: cannot write '{}': it is a folder", dir.path("dm.model")));
  EXPECT_EQ(files_in(dir.path("")), (std::vector<std::string>{"dm.model", "in.model"}));
}

TEST(Vocab, UnigramModel) {
  TempDir dir;
  VocabTrainOptions opt;
  opt.inputs = {kCorpusDir + "/multi30k_300.en"};
  opt.model_prefix = dir.path("uni");
  opt.vocab_size = 150;
  opt.model_type = "unigram";
  const Vocab v = Vocab::train(opt);
  EXPECT_EQ(v.size(), 150);
  const std::string s = "A little girl climbing into a wooden playhouse.";
  EXPECT_EQ(v.decode(v.encode(s)), s);
}

// SentencePiece drops sentences over 4192 bytes: those lines are left out of the sample (an input
// of nothing else is a clear error, not the trainer's internal check).
TEST(Vocab, LinesOverSentencePiecesLimitAreLeftOut) {
  TempDir dir;
  VocabTrainOptions opt;
  opt.inputs = {dir.file("long.txt", std::string(5000, 'a') + "\n")};
  opt.model_prefix = dir.path("m");
  opt.vocab_size = 20;
  EXPECT_EQ(error_of([&] { Vocab::train(opt); }),
            "vocab: the input files hold no sentences of at most 4192 bytes (SentencePiece's limit; 1 longer lines)");
  opt.inputs.push_back(kCorpusDir + "/multi30k_300.en");
  opt.vocab_size = 100;
  EXPECT_EQ(Vocab::train(opt).size(), 100);
}

TEST(Vocab, MissingModelFileNamesIt) {
  EXPECT_EQ(error_of([] { Vocab::load("/nonexistent/spm.model"); }),
            "cannot read vocabulary '/nonexistent/spm.model': No such file or directory");
}

// A model file SentencePiece would parse but then read out of bounds (a damaged normalization
// table: a crash on the first sentence) or load without its normalizer (a file cut short where a
// field ends: different pieces for the same text) is refused, naming the file; so is every
// shorter prefix of a good model, and a FIFO (no hang) or a device.
TEST_F(VocabTest, DamagedOrTruncatedModelFilesAreRefused) {
  std::ifstream in(dir_ / "bpe.model", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(Vocab::from_serialized(good, "good").size(), 200);
  // The normalizer section: its name "nmt_nfkc", then field 2 (key 0x12), a varint length, the
  // table: a 4-byte trie size, the trie, the replacement strings.
  const std::size_t name = good.find("nmt_nfkc");
  ASSERT_NE(name, std::string::npos);
  std::size_t at = name + 8;
  ASSERT_EQ(good[at++], '\x12');
  std::size_t table_bytes = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(good[at++]);
    table_bytes |= static_cast<std::size_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  std::uint32_t trie_bytes = 0;
  std::memcpy(&trie_bytes, good.data() + at, 4);
  ASSERT_LT(trie_bytes + 4, table_bytes);
  TempDir dir;
  std::string damaged = good;
  std::fill_n(damaged.begin() + static_cast<std::ptrdiff_t>(at + 4), trie_bytes, '\xff');
  const std::string p = dir.file("damaged.model", damaged);
  EXPECT_EQ(error_of([&] { Vocab::load(p); })
                .rfind(fmt::format("cannot read vocabulary '{}': not a usable SentencePiece model: its normalization "
                                   "table is damaged: trie unit 0 leads to unit ",
                                   p),
                       0),
            0u)
      << error_of([&] { Vocab::load(p); });
  damaged = good;
  damaged[at + 4 + trie_bytes + (table_bytes - 4 - trie_bytes) - 1] = 'x';  // the last string's NUL
  EXPECT_EQ(error_of([&] { Vocab::from_serialized(damaged, "ckpt:/vocab"); }),
            "cannot read vocabulary 'ckpt:/vocab': not a usable SentencePiece model: its normalization table is "
            "damaged: its replacement strings do not end in NUL");
  // Cut where the normalizer section starts: the pieces and the trainer's section parse.
  const std::string q = dir.file("cut.model", good.substr(0, good.rfind('\x1a', name)));
  EXPECT_EQ(error_of([&] { Vocab::load(q); }),
            fmt::format("cannot read vocabulary '{}': not a usable SentencePiece model: it has no normalizer section "
                        "(a file cut short?)",
                        q));
  for (std::size_t cut = 0; cut < good.size(); cut += cut + 97 < good.size() - 64 ? 97 : 1)
    EXPECT_NE(error_of([&] { Vocab::from_serialized(good.substr(0, cut), "cut"); }), "") << cut << " bytes";
  const std::string fifo = dir.path("fifo.model");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { Vocab::load(fifo); }),
            fmt::format("cannot read vocabulary '{}': not a regular file (a SentencePiece model is one)", fifo));
  EXPECT_EQ(error_of([] { Vocab::load("/dev/zero"); }),
            "cannot read vocabulary '/dev/zero': not a regular file (a SentencePiece model is one)");
}

TEST(Vocab, CorruptModelFileNamesIt) {
  TempDir dir;
  const std::string p = dir.file("junk.model", "this is not a model");
  EXPECT_EQ(error_of([&] { Vocab::load(p); }).rfind(fmt::format("cannot read vocabulary '{}': ", p), 0), 0u);
  // The .vocab file `tessera vocab` writes beside the .model: named as such, the .model suggested.
  const std::string listing = dir.file("sp.vocab", "<pad>\t0\n<unk>\t0\n");
  EXPECT_EQ(
      error_of([&] { Vocab::load(listing); })
          .rfind(fmt::format("cannot read vocabulary '{}' (a .vocab file lists the pieces; give the SentencePiece "
                             "model: '{}'): ",
                             listing, dir.path("sp.model")),
                 0),
      0u);
}

TEST(Vocab, TooLargeVocabularyIsAClearError) {
  TempDir dir;
  VocabTrainOptions opt;
  opt.inputs = {dir.file("small.txt", "a b c\nb c d\n")};
  opt.model_prefix = dir.path("m");
  opt.vocab_size = 5000;
  for (const char* type : {"unigram", "bpe"}) {
    opt.model_type = type;
    const std::string msg = error_of([&] { Vocab::train(opt); });
    EXPECT_NE(msg.find("vocab_size=5000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Vocabulary size too high (5000)"), std::string::npos) << msg;
  }
  // A failed training leaves no file behind (a .model would be taken for a trained vocabulary).
  EXPECT_EQ(files_in(dir.path("")), std::vector<std::string>{"small.txt"});
}

TEST(Vocab, BadOptions) {
  VocabTrainOptions opt;
  opt.inputs = {kCorpusDir + "/tiny.txt"};
  opt.model_prefix = "/tmp/never_written";
  opt.model_type = "wordpiece";
  EXPECT_EQ(error_of([&] { Vocab::train(opt); }), "vocab: model_type 'wordpiece' is not one of bpe, unigram");
  opt.model_type = "bpe";
  opt.inputs = {"/nonexistent/x.txt"};
  EXPECT_EQ(error_of([&] { Vocab::train(opt); }), "cannot read '/nonexistent/x.txt': No such file or directory");
}

// ---------------------------------------------------------------- example sets

TEST(ExampleSet, HoldsPairsExactlyInSixteenBitsWhileIdsFit) {
  const std::vector<Example> pairs = {{{4, 65535, 7}, {9}}, {{}, {}}, {{0}, {1, 2, 3, 65535}}};
  const ExampleSet set(pairs);
  EXPECT_FALSE(set.wide());
  ASSERT_EQ(set.size(), 3);
  EXPECT_EQ(set.to_vector(), pairs);
  EXPECT_EQ(set.src_size(0), 3);
  EXPECT_EQ(set.tgt_size(0), 1);
  EXPECT_EQ(set.src_size(1), 0);
  EXPECT_EQ(set.tgt_size(2), 4);
  std::vector<std::int32_t> tgt(4);
  set.copy_tgt(2, tgt.data());
  EXPECT_EQ(tgt, (std::vector<std::int32_t>{1, 2, 3, 65535}));
  // 9 ids and 6 sequence ends: 2 bytes an id, 8 an end.
  EXPECT_EQ(set.bytes(), 9 * 2 + 6 * 8);
  EXPECT_EQ(error_of([&] { (void)set[3]; }), "ExampleSet: pair 3 is outside [0, 3)");
}

TEST(ExampleSet, WidensToThirtyTwoBitsKeepingEarlierPairs) {
  std::vector<Example> pairs = {{{4, 5}, {6}}, {{65535}, {7}}};
  ExampleSet set(pairs);
  const ExampleSet narrow = set;
  pairs.push_back({{65536, 8}, {2147483647}});
  set.add(pairs.back());
  EXPECT_TRUE(set.wide());
  EXPECT_EQ(set.to_vector(), pairs);
  set.add(pairs[0]);  // later small ids stay exact too
  pairs.push_back(pairs[0]);
  EXPECT_EQ(set.to_vector(), pairs);
  // Sets compare by their pairs, whatever their widths.
  EXPECT_TRUE(set == ExampleSet(set.to_vector()));
  EXPECT_TRUE(narrow == ExampleSet(narrow.to_vector()));
  ExampleSet narrow_plus = narrow, wide_plus = narrow;
  narrow_plus.add({{1}, {1}});
  wide_plus.add({{65536}, {1}});
  EXPECT_FALSE(narrow_plus == wide_plus);
  EXPECT_FALSE(narrow_plus == narrow);
}

// Over a million ids and sequence ends: pairs straddle the storage's chunks (2^20 elements), and
// widening converts every chunk.
TEST(ExampleSet, LargeSetsAcrossChunksAndWidening) {
  std::vector<Example> pairs;
  for (std::int32_t i = 0; i < 600000; ++i) {
    Example e;
    for (std::int32_t k = 0; k < i % 3; ++k) e.src.push_back((i * 7 + k) % 65536);
    for (std::int32_t k = 0; k < (i + 1) % 4; ++k) e.tgt.push_back((i * 13 + k) % 65536);
    pairs.push_back(std::move(e));
  }
  ExampleSet set(pairs);
  ASSERT_FALSE(set.wide());
  ASSERT_EQ(set.size(), 600000);
  EXPECT_EQ(set.to_vector(), pairs);
  const std::int64_t narrow_bytes = set.bytes();
  set.add({{65536 + 5}, {3}});
  pairs.push_back({{65536 + 5}, {3}});
  ASSERT_TRUE(set.wide());
  EXPECT_EQ(set.to_vector(), pairs);
  EXPECT_EQ(set, ExampleSet(pairs));
  EXPECT_GT(set.bytes(), narrow_bytes);
}

TEST(ExampleSet, EmptySets) {
  const ExampleSet empty, also_empty(std::vector<Example>{});
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.bytes(), 0);
  EXPECT_EQ(empty, also_empty);
  EXPECT_FALSE(empty == ExampleSet({{{}, {}}}));  // one empty pair is not no pair
  EXPECT_TRUE(empty.to_vector().empty());
}

TEST(ExampleSet, Extent) {
  const ExampleSet::Extent none = ExampleSet().extent();
  EXPECT_EQ(none.max_src_id, 0);
  EXPECT_EQ(none.longest_tgt, 0);
  for (const std::int32_t big : {9, 70000}) {  // sixteen and thirty-two bit ids
    const ExampleSet::Extent e = ExampleSet({{{4, big, 1}, {2}}, {{}, {3, 5, 6, 7}}, {{8}, {}}}).extent();
    EXPECT_EQ(e.max_src_id, big);
    EXPECT_EQ(e.max_tgt_id, 7);
    EXPECT_EQ(e.longest_src, 3);
    EXPECT_EQ(e.longest_tgt, 4);
  }
}

TEST(ExampleSet, RefusesNegativeIdsAndLeavesTheSetAsItWas) {
  ExampleSet set = {{{4}, {5}}};
  EXPECT_EQ(error_of([&] { set.add({{6}, {-1}}); }), "ExampleSet: token id -1 is negative (pair 1)");
  EXPECT_EQ(set.to_vector(), (std::vector<Example>{{{4}, {5}}}));
}

// ---------------------------------------------------------------- the encoded-pairs file (data.cache)

namespace {

std::optional<ExampleSet> read_back(const std::string& path, std::uint64_t key, ExampleFileInfo& info, std::string& why,
                                    bool check_ids = true) {
  why.clear();
  return read_example_file(path, key, info, why, check_ids);
}

// Overwrites the bytes at `offset` of `path`.
void patch(const std::string& path, std::int64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
std::string as_bytes(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof value);
}

// The header's layout (docs/data.md): pairs at 32, the index's checksum at 88, the header's at 120.
constexpr std::int64_t kHeader = 128, kPairsAt = 32, kIndexSumAt = 88, kHeaderSumAt = 120;

// Makes the header's checksums match damage done on purpose (as a collision would): of the index
// (`pairs` pairs) and of the header.
void rewrite_checksums(const std::string& path, std::int64_t pairs) {
  const std::string bytes = file_bytes(path);
  StreamChecksum index;
  index.update(bytes.data() + kHeader, static_cast<std::size_t>(16 * pairs));
  patch(path, kIndexSumAt, as_bytes(index.value()));
  StreamChecksum header;
  header.update(file_bytes(path).data(), kHeaderSumAt);
  patch(path, kHeaderSumAt, as_bytes(header.value()));
}

}  // namespace

// Every width and size comes back as it was, read in place, with the counts of the pairs encoding
// dropped and the extent: a large set's ends and ids straddle the storage's chunks.
TEST(ExampleFile, RoundTripsEverySet) {
  TempDir dir;
  std::vector<Example> large;
  for (std::int32_t i = 0; i < 600000; ++i) large.push_back({{i % 65536, 7}, {(i * 13) % 65536}});
  ExampleSet wide = {{{1, 2}, {3}}, {{}, {70000}}};
  ASSERT_TRUE(wide.wide());
  const std::vector<ExampleSet> sets = {ExampleSet(), ExampleSet({{{4, 5, 6}, {7}}, {{8}, {}}}), wide,
                                        ExampleSet(large)};
  for (std::size_t k = 0; k < sets.size(); ++k) {
    const std::string path = dir.path("set" + std::to_string(k) + ".bin");
    write_example_file(path, sets[k],
                       {.key = 42 + k, .empty = 3, .too_long = static_cast<std::int64_t>(k), .extent = {}});
    ExampleFileInfo info;
    std::string why;
    const std::optional<ExampleSet> back = read_back(path, 42 + k, info, why);
    ASSERT_TRUE(back.has_value()) << k << ": " << why;
    EXPECT_TRUE(back->in_place());
    EXPECT_EQ(back->bytes(), 0);
    EXPECT_EQ(*back, sets[k]) << k;
    EXPECT_EQ(back->wide(), sets[k].wide()) << k;
    EXPECT_EQ(back->to_vector(), sets[k].to_vector()) << k;
    EXPECT_EQ(info.key, 42 + k);
    EXPECT_EQ(info.empty, 3);
    EXPECT_EQ(info.too_long, static_cast<std::int64_t>(k));
    const ExampleSet::Extent e = sets[k].extent();
    const ExampleSet::Extent& got = info.extent;
    EXPECT_EQ(std::tie(got.max_src_id, got.max_tgt_id, got.longest_src, got.longest_tgt),
              std::tie(e.max_src_id, e.max_tgt_id, e.longest_src, e.longest_tgt));
  }
  // Sixteen-bit ids take two bytes each: a header of 128, 16 a pair, 2 an id.
  EXPECT_EQ(fs::file_size(dir.path("set1.bin")), 128u + 16 * 2 + 2 * 5);
  EXPECT_EQ(fs::file_size(dir.path("set2.bin")), 128u + 16 * 2 + 4 * 4);
  // The mapping outlives the file's name: a set read in place stays whole when the file is replaced.
  ExampleFileInfo info;
  std::string why;
  const std::optional<ExampleSet> kept = read_back(dir.path("set1.bin"), 43, info, why);
  ASSERT_TRUE(kept.has_value()) << why;
  write_example_file(dir.path("set1.bin"), sets[2], {.key = 43, .empty = 0, .too_long = 0, .extent = {}});
  EXPECT_EQ(*kept, sets[1]);
}

// A file that is missing, of another version or key, truncated, damaged or not ours is not used,
// and `why` says which; none of them throws.
TEST(ExampleFile, RefusesWhatItCannotTrust) {
  TempDir dir;
  const ExampleSet set = {{{4, 5, 6}, {7}}, {{8}, {9, 10}}};  // 2 pairs, 7 ids: 128 + 32 + 14 bytes
  const std::string path = dir.path("pairs.bin");
  const auto fresh = [&] { write_example_file(path, set, {.key = 7, .empty = 0, .too_long = 0, .extent = {}}); };
  ExampleFileInfo info;
  std::string why;
  const auto refused = [&](std::uint64_t key) { return !read_back(path, key, info, why).has_value(); };

  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "it does not exist");
  fresh();
  EXPECT_FALSE(refused(7)) << why;
  EXPECT_TRUE(refused(8));
  EXPECT_EQ(why, "it was made from other text, vocabularies or length limit");

  fs::resize_file(path, fs::file_size(path) - 1);
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "it has 173 bytes where its header says 174 (truncated or damaged)");

  // A flipped byte of the ids: found by the ids' checksum, which the other ranks leave to rank 0.
  fresh();
  patch(path, kHeader + 32 + 2, std::string(1, '\x55'));
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "its ids' checksum does not match them (damaged)");
  EXPECT_TRUE(read_back(path, 7, info, why, /*check_ids=*/false).has_value()) << why;

  fresh();
  patch(path, kHeader + 16, std::string(1, '\x02'));  // the third sequence end: 5 -> 2, before the one before it
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "its index's checksum does not match it (damaged)");
  EXPECT_FALSE(read_back(path, 7, info, why, /*check_ids=*/false).has_value());  // every rank checks the index
  // The same damage behind checksums that match it: the ends' order is checked too.
  rewrite_checksums(path, 2);
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "its sequence ends are out of order (damaged)");
  fresh();
  patch(path, kHeader + 24, std::string(1, '\x09'));  // the last end: 7 -> 9, past the 7 ids
  rewrite_checksums(path, 2);
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "its sequence ends are out of order (damaged)");
  fresh();
  patch(path, kHeader + 24, std::string(1, '\x06'));  // the last end: 7 -> 6, one id left over
  rewrite_checksums(path, 2);
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "its sequence ends do not cover its ids (damaged)");

  fresh();
  patch(path, kPairsAt, std::string(1, '\x03'));  // the pair count
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "its header's checksum does not match it (damaged)");
  rewrite_checksums(path, 0);
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "it has 174 bytes where its header says 190 (truncated or damaged)");
  fresh();
  patch(path, kPairsAt, std::string(8, '\xff'));  // a negative pair count
  rewrite_checksums(path, 0);
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "its header is damaged");

  // Another version of the form: the cache before it, and a later one.
  dir.file("pairs.bin", "TESSIDS1" + std::string(100, '\0'));
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "it is of format version 1 (an older Tessera's); this one reads version 2");
  fresh();
  patch(path, 8, as_bytes(std::uint32_t{3}));
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "it is of format version 3; this Tessera reads version 2");

  dir.file("pairs.bin", std::string(200, 'x'));
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "it is not a Tessera corpus file");
  dir.file("pairs.bin", "short");
  EXPECT_TRUE(refused(7));
  EXPECT_EQ(why, "it is truncated (5 bytes)");
  fs::remove(path);
  fs::create_directory(path);
  EXPECT_TRUE(refused(7));
  EXPECT_FALSE(why.empty());
}

// Shares written by parts (one a rank) and joined make the very bytes one writer of the whole set
// makes, for any number of parts (an empty one too); a part that is missing is named.
TEST(ExampleFile, PartsJoinToTheBytesOfOneWriter) {
  TempDir dir;
  const ExampleSet set = varied_examples(3000);
  write_example_file(dir.path("whole.bin"), set, {.key = 5, .empty = 6, .too_long = 9, .extent = {}});
  const std::vector<std::vector<std::int64_t>> splits = {{0, 3000}, {0, 1499, 3000}, {0, 10, 10, 3000}};
  for (const std::vector<std::int64_t>& cuts : splits) {
    std::vector<std::string> prefixes;
    for (std::size_t p = 0; p + 1 < cuts.size(); ++p) {
      prefixes.push_back(dir.path(fmt::format("joined.bin.part{}", p)));
      ExamplePartWriter part(prefixes.back(), 2);
      for (std::int64_t i = cuts[p]; i < cuts[p + 1]; ++i) part.add(set[i].src, set[i].tgt);
      part.finish(p == 0 ? 6 : 0, p + 2 == cuts.size() ? 9 : 0);
    }
    join_example_parts(dir.path("joined.bin"), prefixes, 5);
    EXPECT_EQ(file_bytes(dir.path("joined.bin")), file_bytes(dir.path("whole.bin"))) << cuts.size() - 1 << " parts";
    for (const std::string& prefix : prefixes) remove_example_part(prefix);
  }
  EXPECT_EQ(files_in(dir.path("")), (std::vector<std::string>{"joined.bin", "whole.bin"}));
  const std::string missing = dir.path("no_such.part0");
  EXPECT_EQ(error_of([&] { join_example_parts(dir.path("joined.bin"), {missing}, 5); }),
            fmt::format("the encoded part '{}.ends.tmp' cannot be read: No such file or directory", missing));
}

// A write that fails names the file and why, and leaves no file behind; a write over an old file
// replaces it whole.
TEST(ExampleFile, WritesWholeFilesOrNone) {
  TempDir dir;
  const ExampleSet set = {{{4}, {5}}};
  const std::string missing = dir.path("no_such_dir/pairs.bin");
  EXPECT_EQ(error_of([&] { write_example_file(missing, set, {}); }),
            fmt::format("cannot write encoded pairs to '{}': No such file or directory", missing));
  const std::string path = dir.path("pairs.bin");
  write_example_file(path, ExampleSet({{{1, 2, 3}, {4, 5, 6}}}), {.key = 1, .empty = 0, .too_long = 0, .extent = {}});
  // What killed writers of this file left goes (a process of this machine that is gone; any writer's
  // of a day ago); a live writer's, other files' and other names stay.
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const pid_t gone = ::fork();  // a pid that is certainly gone: a child that exited and was reaped
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ::waitpid(gone, nullptr, 0);
  const std::string dead = fmt::format("pairs.bin.{}.{}.abc.tmp", host, gone);
  const std::string live = fmt::format("pairs.bin.{}.{}.abc.tmp", host, ::getpid());
  const std::string old_elsewhere = "pairs.bin.elsewhere.42.abc.tmp", new_elsewhere = "pairs.bin.elsewhere.43.abc.tmp";
  for (const std::string& name : {dead, live, old_elsewhere, new_elsewhere}) dir.file(name, "half");
  fs::last_write_time(dir.path(old_elsewhere), fs::file_time_type::clock::now() - std::chrono::hours(25));
  dir.file("other.bin.x.123.abc.tmp", "half");
  dir.file("pairs.bin.tmp", "not a leftover's name");
  write_example_file(path, set, {.key = 2, .empty = 0, .too_long = 0, .extent = {}});
  std::vector<std::string> expected = {live, new_elsewhere, "other.bin.x.123.abc.tmp", "pairs.bin", "pairs.bin.tmp"};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files_in(dir.path("")), expected);
  ExampleFileInfo info;
  std::string why;
  EXPECT_EQ(read_back(path, 2, info, why), std::optional<ExampleSet>(set)) << why;
  if (::geteuid() != 0) {  // root writes into a read-only folder all the same
    fs::permissions(dir.path(""), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_NE(error_of([&] { write_example_file(path, set, {}); }).find("Permission denied"), std::string::npos);
    fs::permissions(dir.path(""), fs::perms::owner_all);
  }
}

TEST(Batch, MakeBatchWithThirtyTwoBitIds) {
  const ExampleSet ex = {{{70000, 11}, {5}}, {{13}, {100000, 22}}};
  ASSERT_TRUE(ex.wide());
  const Batch b = make_batch(ex, {0, 1});
  EXPECT_EQ(row(b.src, 0), (std::vector<std::int32_t>{70000, 11, kEosId}));
  EXPECT_EQ(row(b.tgt_in, 1), (std::vector<std::int32_t>{kBosId, 100000, 22}));
  EXPECT_EQ(row(b.tgt_out, 1), (std::vector<std::int32_t>{100000, 22, kEosId}));
}

// ---------------------------------------------------------------- batching

TEST(Batch, MakeBatchExactTensors) {
  const ExampleSet ex = {{{10, 11, 12}, {20}}, {{13}, {21, 22, 23, 24}}, {{}, {}}};
  const Batch b = make_batch(ex, {1, 0});
  // Ls = 3 + 1 (eos), Lt = 4 + 1 (bos or eos).
  ASSERT_EQ(b.src.shape(), (Shape{2, 4}));
  ASSERT_EQ(b.src_padding.shape(), (Shape{2, 4}));
  ASSERT_EQ(b.tgt_in.shape(), (Shape{2, 5}));
  ASSERT_EQ(b.tgt_out.shape(), (Shape{2, 5}));
  EXPECT_EQ(b.src.dtype(), DType::i32);
  EXPECT_EQ(row(b.src, 0), (std::vector<std::int32_t>{13, kEosId, kPadId, kPadId}));
  EXPECT_EQ(row(b.src, 1), (std::vector<std::int32_t>{10, 11, 12, kEosId}));
  EXPECT_EQ(row(b.src_padding, 0), (std::vector<std::int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(row(b.src_padding, 1), (std::vector<std::int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(row(b.tgt_in, 0), (std::vector<std::int32_t>{kBosId, 21, 22, 23, 24}));
  EXPECT_EQ(row(b.tgt_in, 1), (std::vector<std::int32_t>{kBosId, 20, kPadId, kPadId, kPadId}));
  EXPECT_EQ(row(b.tgt_out, 0), (std::vector<std::int32_t>{21, 22, 23, 24, kEosId}));
  EXPECT_EQ(row(b.tgt_out, 1), (std::vector<std::int32_t>{20, kEosId, kPadId, kPadId, kPadId}));
  EXPECT_EQ(b.indices, (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(b.src_tokens, 2 + 4);
  EXPECT_EQ(b.tgt_tokens, 5 + 2);
  EXPECT_EQ(b.padded_slots, 2 * 4 + 2 * 5);
  EXPECT_DOUBLE_EQ(b.padding_fraction(), 1.0 - 13.0 / 18.0);

  const Batch e = make_batch(ex, {2});  // an empty pair: eos only, bos only
  EXPECT_EQ(row(e.src, 0), (std::vector<std::int32_t>{kEosId}));
  EXPECT_EQ(row(e.tgt_in, 0), (std::vector<std::int32_t>{kBosId}));
  EXPECT_EQ(row(e.tgt_out, 0), (std::vector<std::int32_t>{kEosId}));
  EXPECT_DOUBLE_EQ(e.padding_fraction(), 0.0);

  EXPECT_EQ(error_of([&] { make_batch(ex, {0, 3}); }), "make_batch: example index 3 is outside [0, 3)");
}

TEST(Batch, TokenBudgetAndEveryExampleOncePerEpoch) {
  const auto ex = varied_examples(3000);
  for (const bool shuffle : {true, false}) {
    BatcherOptions opt;
    opt.batch_tokens = 400;
    opt.shuffle = shuffle;
    opt.window = 8;
    Batcher b(&ex, opt);
    for (int epoch = 0; epoch < 2; ++epoch) {
      const std::int64_t planned = b.batches_per_epoch();
      std::vector<int> seen(static_cast<std::size_t>(ex.size()), 0);
      Batch batch;
      std::int64_t count = 0;
      while (b.next(batch)) {
        ++count;
        EXPECT_EQ(b.position(), count);
        const std::int64_t rows = batch.src.size(0);
        const std::int64_t width = std::max(batch.src.size(1), batch.tgt_in.size(1));
        EXPECT_TRUE(rows * width <= opt.batch_tokens || rows == 1) << rows << " x " << width;
        for (const auto i : batch.indices) ++seen[static_cast<std::size_t>(i)];
      }
      EXPECT_EQ(count, planned);
      EXPECT_EQ(b.epoch(), epoch + 1);
      EXPECT_EQ(b.position(), 0);
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; })) << "shuffle " << shuffle;
    }
  }
}

TEST(Batch, OverlongExampleGetsItsOwnBatch) {
  std::vector<Example> pairs = make_synthetic(SyntheticTask::copy, 20, 2, 4, 10, 1).to_vector();
  pairs[7].src.assign(100, 5);
  const ExampleSet ex(pairs);
  BatcherOptions opt;
  opt.batch_tokens = 30;
  Batcher b(&ex, opt);
  Batch batch;
  bool found = false;
  while (b.next(batch))
    if (std::find(batch.indices.begin(), batch.indices.end(), 7) != batch.indices.end()) {
      EXPECT_EQ(batch.indices.size(), 1u);
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(Batch, SortingLowersPadding) {
  const auto ex = varied_examples(3000);
  auto padding = [&](bool shuffle) {
    BatcherOptions opt;
    opt.batch_tokens = 600;
    opt.shuffle = shuffle;
    Batcher b(&ex, opt);
    Batch batch;
    std::int64_t tokens = 0, slots = 0;
    while (b.next(batch)) {
      tokens += batch.src_tokens + batch.tgt_tokens;
      slots += batch.padded_slots;
      EXPECT_GE(batch.padding_fraction(), 0.0);
      EXPECT_LT(batch.padding_fraction(), 1.0);
    }
    return 1.0 - static_cast<double>(tokens) / static_cast<double>(slots);
  };
  const double sorted = padding(true), unsorted = padding(false);
  EXPECT_LT(sorted, 0.15);
  EXPECT_GT(unsorted, 0.3);
  EXPECT_LT(sorted, unsorted / 2);
}

TEST(Batch, UnshuffledKeepsCorpusOrder) {
  const auto ex = varied_examples(500);
  BatcherOptions opt;
  opt.batch_tokens = 300;
  opt.shuffle = false;
  Batcher b(&ex, opt);
  const auto first = epoch_batches(b);
  std::vector<std::int64_t> order;
  for (const auto& batch : first) order.insert(order.end(), batch.begin(), batch.end());
  std::vector<std::int64_t> want(static_cast<std::size_t>(ex.size()));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
  EXPECT_EQ(order, want);
  EXPECT_EQ(epoch_batches(b), first);  // the same batches every epoch
}

TEST(Batch, DeterministicForSeedAndVariesAcrossEpochsAndSeeds) {
  const auto ex = varied_examples(2000);
  BatcherOptions opt;
  opt.batch_tokens = 500;
  opt.seed = 11;
  Batcher a(&ex, opt), b(&ex, opt);
  const auto a0 = epoch_batches(a), a1 = epoch_batches(a);
  EXPECT_EQ(a0, epoch_batches(b));
  EXPECT_EQ(a1, epoch_batches(b));
  EXPECT_NE(a0, a1);
  opt.seed = 12;
  Batcher c(&ex, opt);
  EXPECT_NE(a0, epoch_batches(c));
  // With one window holding the whole corpus, the batches come out sorted by length unless their
  // order is shuffled too.
  opt.window = 1000;
  Batcher one_window(&ex, opt);
  std::vector<std::size_t> first_len;
  for (const auto& batch : epoch_batches(one_window))
    first_len.push_back(static_cast<std::size_t>(ex.src_size(batch[0])));
  EXPECT_GT(first_len.size(), 50u);
  EXPECT_FALSE(std::is_sorted(first_len.begin(), first_len.end()));
}

namespace {

// The batches as the batcher planned them before it kept its plan compactly (a vector of index
// vectors): the compact plan must give the very same ones.
std::vector<std::vector<std::int64_t>> reference_epoch(const ExampleSet& ex, const BatcherOptions& opt,
                                                       std::int64_t epoch) {
  const auto mix = [](std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  std::vector<std::int64_t> order(static_cast<std::size_t>(ex.size()));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::mt19937_64 rng(mix(opt.seed ^ mix(static_cast<std::uint64_t>(epoch))));
  const auto shuffle = [&](auto& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<std::size_t>(uniform_below(rng, i))]);
  };
  shuffle(order);
  const auto len = [&](std::int64_t i) { return std::max(ex.src_size(i), ex.tgt_size(i)) + 1; };
  std::vector<std::vector<std::int64_t>> plan;
  std::size_t begin = 0;
  while (begin < order.size()) {
    std::size_t end = begin;
    for (std::int64_t tokens = 0; end < order.size() && tokens < opt.window * opt.batch_tokens; ++end)
      tokens += len(order[end]);
    const auto at = [&](std::size_t k) { return order.begin() + static_cast<std::ptrdiff_t>(k); };
    std::stable_sort(at(begin), at(end), [&](std::int64_t a, std::int64_t b) {
      return std::pair(ex.src_size(a), ex.tgt_size(a)) < std::pair(ex.src_size(b), ex.tgt_size(b));
    });
    std::vector<std::int64_t> cur;
    std::int64_t width = 0;
    for (std::size_t k = begin; k < end; ++k) {
      const std::int64_t w = std::max(width, len(order[k]));
      if (!cur.empty() && static_cast<std::int64_t>(cur.size() + 1) * w > opt.batch_tokens) {
        plan.push_back(std::exchange(cur, {}));
        width = len(order[k]);
      } else {
        width = w;
      }
      cur.push_back(order[k]);
    }
    if (!cur.empty()) plan.push_back(cur);
    begin = end;
  }
  shuffle(plan);
  return plan;
}

}  // namespace

// The same batches as before the plan was kept in 4-byte indices, from pairs in memory or read in
// place from a corpus file.
TEST(Batch, CompactPlanGivesTheBatchesOfBefore) {
  TempDir dir;
  const ExampleSet ex = varied_examples(2500);
  write_example_file(dir.path("pairs.bin"), ex, {.key = 1, .empty = 0, .too_long = 0, .extent = {}});
  ExampleFileInfo info;
  std::string why;
  const std::optional<ExampleSet> mapped = read_example_file(dir.path("pairs.bin"), 1, info, why);
  ASSERT_TRUE(mapped.has_value()) << why;
  BatcherOptions opt;
  opt.batch_tokens = 600;
  opt.seed = 5;
  opt.window = 7;
  Batcher in_memory(&ex, opt), in_place(&*mapped, opt);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto want = reference_epoch(ex, opt, epoch);
    EXPECT_EQ(epoch_batches(in_memory), want) << "epoch " << epoch;
    EXPECT_EQ(epoch_batches(in_place), want) << "epoch " << epoch;
  }
}

TEST(Batch, SeekResumesExactly) {
  const auto ex = varied_examples(1500);
  BatcherOptions opt;
  opt.batch_tokens = 500;
  opt.seed = 5;
  // The uninterrupted run: three epochs, with the epoch-end `false` marked by an empty entry.
  Batcher full(&ex, opt);
  std::vector<std::vector<std::int64_t>> stream;
  std::vector<std::pair<std::int64_t, std::int64_t>> state;  // (epoch, position) before each call
  Batch batch;
  for (int e = 0; e < 3;) {
    state.emplace_back(full.epoch(), full.position());
    if (full.next(batch)) {
      stream.push_back(batch.indices);
    } else {
      stream.emplace_back();
      ++e;
    }
  }
  // Resume from several points: mid-epoch, just before and after the epoch boundary.
  const std::int64_t n0 =
      static_cast<std::int64_t>(std::find(stream.begin(), stream.end(), std::vector<std::int64_t>{}) - stream.begin());
  for (const std::int64_t k : {std::int64_t{0}, std::int64_t{3}, n0 - 1, n0, n0 + 1, n0 + 7}) {
    Batcher resumed(&ex, opt);
    resumed.seek(state[static_cast<std::size_t>(k)].first, state[static_cast<std::size_t>(k)].second);
    for (std::size_t i = static_cast<std::size_t>(k); i < stream.size(); ++i) {
      const bool got = resumed.next(batch);
      ASSERT_EQ(got, !stream[i].empty()) << "resumed at " << k << ", call " << i;
      if (got) {
        ASSERT_EQ(batch.indices, stream[i]) << "resumed at " << k << ", call " << i;
      }
    }
  }
  // Seeking back into an earlier epoch works too.
  Batcher back(&ex, opt);
  epoch_batches(back);
  epoch_batches(back);
  back.seek(0, 2);
  ASSERT_TRUE(back.next(batch));
  EXPECT_EQ(batch.indices, stream[2]);

  EXPECT_NE(error_of([&] { back.seek(0, 1000000); }).find("position 1000000"), std::string::npos);
  EXPECT_EQ(back.epoch(), 0);  // a failed seek leaves the state as it was
  EXPECT_EQ(back.position(), 3);
}

TEST(Batch, EmptyCorpus) {
  const ExampleSet ex;
  Batcher b(&ex, BatcherOptions{});
  Batch batch;
  EXPECT_EQ(b.batches_per_epoch(), 0);
  EXPECT_FALSE(b.next(batch));
  EXPECT_EQ(b.epoch(), 1);
}

// ---------------------------------------------------------------- synthetic

TEST(Synthetic, TargetsPerTask) {
  for (const auto task : {SyntheticTask::copy, SyntheticTask::reverse, SyntheticTask::sort}) {
    const auto ex = make_synthetic(task, 200, 3, 12, 20, 42).to_vector();
    ASSERT_EQ(ex.size(), 200u);
    for (const auto& e : ex) {
      std::vector<std::int32_t> want = e.src;
      if (task == SyntheticTask::reverse) std::reverse(want.begin(), want.end());
      if (task == SyntheticTask::sort) std::sort(want.begin(), want.end());
      EXPECT_EQ(e.tgt, want);
    }
  }
  // Reverse and sort really change the order (for some examples).
  const auto rev = make_synthetic(SyntheticTask::reverse, 50, 5, 10, 20, 1).to_vector();
  const auto srt = make_synthetic(SyntheticTask::sort, 50, 5, 10, 20, 1).to_vector();
  EXPECT_TRUE(std::any_of(rev.begin(), rev.end(), [](const Example& e) { return e.src != e.tgt; }));
  EXPECT_TRUE(std::any_of(srt.begin(), srt.end(), [](const Example& e) { return e.src != e.tgt; }));
}

TEST(Synthetic, LengthsAndTokensInRange) {
  const auto ex = make_synthetic(SyntheticTask::copy, 2000, 2, 9, 13, 3).to_vector();
  std::set<std::size_t> lengths;
  std::set<std::int32_t> tokens;
  for (const auto& e : ex) {
    lengths.insert(e.src.size());
    tokens.insert(e.src.begin(), e.src.end());
  }
  EXPECT_EQ(*lengths.begin(), 2u);
  EXPECT_EQ(*lengths.rbegin(), 9u);
  EXPECT_EQ(lengths.size(), 8u);
  EXPECT_EQ(*tokens.begin(), kFirstSymbol);
  EXPECT_EQ(*tokens.rbegin(), kFirstSymbol + 12);
  EXPECT_EQ(tokens.size(), 13u);
}

TEST(Synthetic, DeterministicForSeed) {
  auto flat = [](const ExampleSet& ex) {
    std::vector<std::vector<std::int32_t>> out;
    for (const auto& e : ex.to_vector()) out.push_back(e.src);
    return out;
  };
  const auto a = make_synthetic(SyntheticTask::sort, 100, 1, 20, 30, 9);
  const auto b = make_synthetic(SyntheticTask::sort, 100, 1, 20, 30, 9);
  const auto c = make_synthetic(SyntheticTask::sort, 100, 1, 20, 30, 10);
  EXPECT_EQ(flat(a), flat(b));
  EXPECT_NE(flat(a), flat(c));
}

TEST(Synthetic, ParseTask) {
  EXPECT_EQ(parse_synthetic_task("copy"), SyntheticTask::copy);
  EXPECT_EQ(parse_synthetic_task("reverse"), SyntheticTask::reverse);
  EXPECT_EQ(parse_synthetic_task("sort"), SyntheticTask::sort);
  EXPECT_EQ(error_of([] { parse_synthetic_task("rotate"); }),
            "unknown synthetic task 'rotate' (valid: copy, reverse, sort)");
  EXPECT_NE(error_of([] { make_synthetic(SyntheticTask::copy, 1, 5, 2, 10, 1); }).find("[5, 2]"), std::string::npos);
}
