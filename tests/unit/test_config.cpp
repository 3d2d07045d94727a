#include <fmt/core.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/run_config.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

// A few keys of each type, two levels of nesting, one top-level key, one key without a range.
const Schema& test_schema() {
  static const Schema schema = Schema()
                                   .integer("model.layers", 6, 1, 64, "number of layers")
                                   .string("model.norm", "pre", {"post", "pre"}, "layer norm placement")
                                   .real("model.dropout", 0.1, 0.0, 1.0, "dropout probability")
                                   .integer("model.attention.heads", 8, 1, 128, "attention heads")
                                   .real("optim.lr", 3e-4, 0.0, 10.0, "learning rate")
                                   .boolean("optim.amsgrad", false, "AMSGrad variant of Adam")
                                   .integer("train.seed", 1234, 1, 0, "random seed")  // min > max: no range
                                   .string("train.name", "demo", {}, "run name")
                                   .integer("steps", 1000, 0, 1000000, "training steps");
  return schema;
}

// The ConfigError message `f` throws, or "no error".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

Config parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return Config::parse(test_schema(), yaml, "configs/x.yaml", overrides);
}

std::string parse_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse(yaml, overrides); });
}

std::string override_error(const std::string& override_text) { return parse_error("", {override_text}); }

// Every key has the same value in both configs.
void expect_same(const Config& a, const Config& b) {
  for (const KeySpec& spec : test_schema().keys()) {
    SCOPED_TRACE(spec.key);
    switch (spec.type) {
      case ValueType::integer:
        EXPECT_EQ(a.integer(spec.key), b.integer(spec.key));
        break;
      case ValueType::real: {
        const double x = a.real(spec.key), y = b.real(spec.key);
        EXPECT_TRUE(x == y || (std::isnan(x) && std::isnan(y))) << x << " vs " << y;
        EXPECT_EQ(std::signbit(x), std::signbit(y));
        break;
      }
      case ValueType::boolean:
        EXPECT_EQ(a.boolean(spec.key), b.boolean(spec.key));
        break;
      case ValueType::string:
        EXPECT_EQ(a.string(spec.key), b.string(spec.key));
        break;
    }
  }
  EXPECT_EQ(a.to_yaml(true), b.to_yaml(true));
}

// Temporary YAML files in a directory of their own, removed after the test.
class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("tessera_config_{}_{}_{}", info->test_suite_name(), info->name(), static_cast<long>(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// Schema

TEST(SchemaTest, KeepsOrderAndFindsKeys) {
  const Schema& schema = test_schema();
  ASSERT_EQ(schema.keys().size(), 9u);
  EXPECT_EQ(schema.keys()[0].key, "model.layers");
  EXPECT_EQ(schema.keys()[8].key, "steps");
  const KeySpec* layers = schema.find("model.layers");
  ASSERT_NE(layers, nullptr);
  EXPECT_EQ(layers->type, ValueType::integer);
  EXPECT_EQ(layers->default_value, "6");
  EXPECT_EQ(layers->min, 1);
  EXPECT_EQ(layers->max, 64);
  EXPECT_EQ(layers->doc, "number of layers");
  EXPECT_EQ(schema.find("model"), nullptr);  // a section is not a key
  EXPECT_EQ(schema.find("model.layer"), nullptr);
}

TEST(SchemaTest, StoresCanonicalDefaults) {
  const Schema& schema = test_schema();
  EXPECT_EQ(schema.find("model.dropout")->default_value, "0.1");
  EXPECT_EQ(schema.find("optim.lr")->default_value, "0.0003");
  EXPECT_EQ(schema.find("optim.amsgrad")->default_value, "false");
  Schema other;
  other.real("scale", 2.0, 0, 10, "").real("eps", 1e-9, 0, 1, "");
  EXPECT_EQ(other.find("scale")->default_value, "2.0");
  EXPECT_EQ(other.find("eps")->default_value, "1e-09");
}

TEST(SchemaTest, RejectsDuplicateKey) {
  Schema schema;
  schema.integer("model.layers", 6, 1, 64, "");
  EXPECT_EQ(error_of([&] { schema.real("model.layers", 1, 0, 2, ""); }), "schema: duplicate key 'model.layers'");
}

TEST(SchemaTest, RejectsKeyThatIsAlsoASection) {
  Schema schema;
  schema.integer("model.layers", 6, 1, 64, "");
  EXPECT_EQ(error_of([&] { schema.boolean("model", true, ""); }),
            "schema: key 'model' conflicts with 'model.layers' (a key cannot also be a section)");
  EXPECT_EQ(error_of([&] { schema.boolean("model.layers.deep", true, ""); }),
            "schema: key 'model.layers.deep' conflicts with 'model.layers' (a key cannot also be a section)");
}

TEST(SchemaTest, RejectsMalformedKey) {
  Schema schema;
  for (const std::string key : {"", "a..b", ".a", "a.", "a b", "a=b"}) {
    EXPECT_EQ(
        error_of([&] { schema.integer(key, 0, 0, 1, ""); }),
        fmt::format("schema: invalid key '{}' (expected dot-separated names of letters, digits, '_' or '-')", key));
  }
  EXPECT_EQ(error_of([&] { schema.integer("dim-emb.v_2", 0, 0, 1, ""); }), "no error");
}

TEST(SchemaTest, RejectsDefaultOutsideRange) {
  Schema schema;
  EXPECT_EQ(error_of([&] { schema.integer("layers", 0, 1, 64, ""); }),
            "schema default: 'layers' = 0 is outside the allowed range [1, 64]");
  EXPECT_EQ(error_of([&] { schema.real("lr", -1, 0, 1, ""); }),
            "schema default: 'lr' = -1.0 is outside the allowed range [0.0, 1.0]");
  EXPECT_EQ(schema.keys().size(), 0u);  // nothing added
  // Range edges are allowed; min > max means no range.
  EXPECT_EQ(error_of([&] { schema.integer("a", 1, 1, 64, "").integer("b", 64, 1, 64, ""); }), "no error");
  EXPECT_EQ(error_of([&] { schema.integer("seed", -5, 1, 0, ""); }), "no error");
}

TEST(SchemaTest, RejectsDefaultNotInChoices) {
  Schema schema;
  EXPECT_EQ(error_of([&] {
              schema.string("norm", "mid", {"post", "pre"}, "");
            }),
            "schema default: 'norm' = 'mid' is not one of: post, pre");
  EXPECT_EQ(error_of([&] { schema.string("name", "anything", {}, ""); }), "no error");
}

TEST(SchemaTest, NearestKeyByEditDistance) {
  const Schema& schema = test_schema();
  EXPECT_EQ(schema.nearest("model.layer"), "model.layers");
  EXPECT_EQ(schema.nearest("modle.layers"), "model.layers");  // a transposition is one edit
  EXPECT_EQ(schema.nearest("step"), "steps");
  EXPECT_EQ(schema.nearest("model.dropuot"), "model.dropout");
}

TEST(SchemaTest, NearestKeyByLastComponent) {
  const Schema& schema = test_schema();
  EXPECT_EQ(schema.nearest("layers"), "model.layers");  // right name, wrong section
  EXPECT_EQ(schema.nearest("train.lr"), "optim.lr");
  EXPECT_EQ(schema.nearest("model.attention.layers"), "model.layers");
}

TEST(SchemaTest, NearestKeyEmptyWhenNothingIsClose) {
  const Schema& schema = test_schema();
  EXPECT_EQ(schema.nearest("vocabulary"), "");
  EXPECT_EQ(schema.nearest("model.heads.count"), "");
  EXPECT_EQ(schema.nearest("x"), "");
  EXPECT_EQ(Schema().nearest("steps"), "");
}

// ---------------------------------------------------------------------------------------------
// Defaults, values, overrides

TEST(ConfigTest, DefaultsWhenNothingIsGiven) {
  const Config config = Config::load(test_schema(), "", {});
  EXPECT_EQ(config.integer("model.layers"), 6);
  EXPECT_EQ(config.string("model.norm"), "pre");
  EXPECT_EQ(config.real("model.dropout"), 0.1);
  EXPECT_EQ(config.integer("model.attention.heads"), 8);
  EXPECT_EQ(config.real("optim.lr"), 3e-4);
  EXPECT_FALSE(config.boolean("optim.amsgrad"));
  EXPECT_EQ(config.integer("train.seed"), 1234);
  EXPECT_EQ(config.string("train.name"), "demo");
  EXPECT_EQ(config.integer("steps"), 1000);
}

TEST(ConfigTest, EmptyTextGivesDefaults) {
  const Config defaults = Config::load(test_schema(), "", {});
  for (const std::string text : {"", "\n\n", "# only a comment\n", "---\n", "model:\n"}) {
    SCOPED_TRACE(text);
    expect_same(parse(text), defaults);
  }
}

TEST(ConfigTest, ReadsNestedSections) {
  const Config config = parse(
      "model:\n"
      "  layers: 12\n"
      "  attention:\n"
      "    heads: 4\n"
      "optim: {lr: 0.01, amsgrad: true}\n"
      "steps: 20\n");
  EXPECT_EQ(config.integer("model.layers"), 12);
  EXPECT_EQ(config.integer("model.attention.heads"), 4);
  EXPECT_EQ(config.real("optim.lr"), 0.01);
  EXPECT_TRUE(config.boolean("optim.amsgrad"));
  EXPECT_EQ(config.integer("steps"), 20);
  EXPECT_EQ(config.string("model.norm"), "pre");  // untouched keys keep their defaults
}

TEST(ConfigTest, AcceptsDottedKeysInFile) {
  const Config config = parse("model.layers: 7\nmodel:\n  attention.heads: 2\n");
  EXPECT_EQ(config.integer("model.layers"), 7);
  EXPECT_EQ(config.integer("model.attention.heads"), 2);
}

TEST(ConfigTest, OverrideBeatsFileBeatsDefault) {
  const Config config = parse("model:\n  layers: 12\n  norm: post\n", {"model.layers=24"});
  EXPECT_EQ(config.integer("model.layers"), 24);   // override
  EXPECT_EQ(config.string("model.norm"), "post");  // file
  EXPECT_EQ(config.integer("steps"), 1000);        // default
}

TEST(ConfigTest, OverridesApplyInOrder) { EXPECT_EQ(parse("steps: 1\n", {"steps=5", "steps=7"}).integer("steps"), 7); }

TEST(ConfigTest, OverrideValueIsAYamlScalar) {
  const Config config = parse(
      "", {"train.name='hello world'", "model.dropout=1e-1", "optim.amsgrad=true", " steps = 3 ", "model.norm= post "});
  EXPECT_EQ(config.string("train.name"), "hello world");
  EXPECT_EQ(config.real("model.dropout"), 0.1);
  EXPECT_TRUE(config.boolean("optim.amsgrad"));
  EXPECT_EQ(config.integer("steps"), 3);
  EXPECT_EQ(config.string("model.norm"), "post");
  EXPECT_EQ(parse("", {"train.name=a=b"}).string("train.name"), "a=b");  // split at the first '='
}

// A string key's value is the text as written (trimmed; quotes removed): YAML would drop a " #..."
// and read "~" or "null" as empty, changing a path silently.
TEST(ConfigTest, StringOverrideIsTakenLiterally) {
  EXPECT_EQ(parse("", {"train.name=/runs/r #2"}).string("train.name"), "/runs/r #2");
  EXPECT_EQ(parse("", {"train.name=~"}).string("train.name"), "~");
  EXPECT_EQ(parse("", {"train.name=null"}).string("train.name"), "null");
  EXPECT_EQ(parse("", {"train.name=%x"}).string("train.name"), "%x");
  EXPECT_EQ(parse("", {"train.name=!x"}).string("train.name"), "!x");
  EXPECT_EQ(parse("", {"train.name=\"a b\""}).string("train.name"), "a b");
  EXPECT_EQ(override_error("model.norm=post  # comment"),
            "--set model.norm=post  # comment: 'model.norm' = 'post  # comment' is not one of: post, pre");
}

TEST(ConfigTest, EmptyValueIsAnEmptyString) {
  EXPECT_EQ(parse("train:\n  name:\n  seed: 5\n").string("train.name"), "");
  EXPECT_EQ(parse("train: {name: null}\n").string("train.name"), "");
  EXPECT_EQ(parse("train: {name: ''}\n").string("train.name"), "");
  EXPECT_EQ(parse("train: {name: 'null'}\n").string("train.name"), "null");
  EXPECT_EQ(parse("train: {name: x}\n", {"train.name="}).string("train.name"), "");
}

TEST(ConfigTest, RangeEdgesAreAllowed) {
  EXPECT_EQ(parse("model: {layers: 1, dropout: 0.0}\nsteps: 0\n").integer("model.layers"), 1);
  const Config high = parse("model: {layers: 64, dropout: 1.0}\nsteps: 1000000\n");
  EXPECT_EQ(high.integer("model.layers"), 64);
  EXPECT_EQ(high.real("model.dropout"), 1.0);
  EXPECT_EQ(high.integer("steps"), 1000000);
  // No range: anything in int64.
  EXPECT_EQ(parse("", {"train.seed=-9223372036854775808"}).integer("train.seed"),
            std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(parse("", {"train.seed=9223372036854775807"}).integer("train.seed"),
            std::numeric_limits<std::int64_t>::max());
}

TEST(ConfigTest, NormalizesValues) {
  const Config config = parse(
      "model:\n"
      "  layers: 6.0\n"  // integral: stored as 6
      "  attention: {heads: 1e1}\n"
      "  dropout: 0.50\n"
      "optim:\n"
      "  lr: 1\n"
      "steps: +3\n");
  EXPECT_EQ(config.integer("model.layers"), 6);
  EXPECT_EQ(config.integer("model.attention.heads"), 10);
  EXPECT_EQ(config.integer("steps"), 3);
  EXPECT_EQ(config.to_yaml(false),
            "model:\n"
            "  layers: 6\n"
            "  norm: pre\n"
            "  dropout: 0.5\n"
            "  attention:\n"
            "    heads: 10\n"
            "optim:\n"
            "  lr: 1.0\n"
            "  amsgrad: false\n"
            "train:\n"
            "  seed: 1234\n"
            "  name: demo\n"
            "steps: 3\n");
}

// ---------------------------------------------------------------------------------------------
// Files

TEST_F(ConfigFile, ReadsValuesFromFile) {
  const std::string path = write("x.yaml", "model:\n  layers: 3\n  norm: post\noptim:\n  lr: 0.5\n");
  const Config config = Config::load(test_schema(), path, {});
  EXPECT_EQ(config.integer("model.layers"), 3);
  EXPECT_EQ(config.string("model.norm"), "post");
  EXPECT_EQ(config.real("optim.lr"), 0.5);
}

TEST_F(ConfigFile, OverrideBeatsFileBeatsDefault) {
  const std::string path = write("x.yaml", "model:\n  layers: 3\n  norm: post\n");
  const Config config = Config::load(test_schema(), path, {"model.norm=pre"});
  EXPECT_EQ(config.string("model.norm"), "pre");
  EXPECT_EQ(config.integer("model.layers"), 3);
  EXPECT_EQ(config.integer("steps"), 1000);
}

TEST_F(ConfigFile, EmptyFileGivesDefaults) {
  const Config config = Config::load(test_schema(), write("empty.yaml", ""), {});
  expect_same(config, Config::load(test_schema(), "", {}));
}

TEST_F(ConfigFile, ErrorNamesTheFileAndLine) {
  const std::string path = write("bad.yaml", "# comment\nmodel:\n  layers: 4\n\n  layers_: 2\n");
  EXPECT_EQ(error_of([&] { Config::load(test_schema(), path, {}); }),
            path + ":5: unknown key 'model.layers_' (did you mean 'model.layers'?)");
}

TEST_F(ConfigFile, MissingFile) {
  const std::string path = (dir_ / "missing.yaml").string();
  EXPECT_EQ(error_of([&] { Config::load(test_schema(), path, {}); }),
            "cannot read config file '" + path + "': No such file or directory");
}

TEST_F(ConfigFile, DirectoryIsNotReadable) {
  const std::string path = dir_.string();
  EXPECT_EQ(error_of([&] { Config::load(test_schema(), path, {}); }),
            "cannot read config file '" + path + "': Is a directory");
}

// A device or a huge file given by mistake is refused before it takes the memory.
TEST_F(ConfigFile, MoreThan16MiBIsNoConfig) {
  const std::string path = write("huge.yaml", std::string((std::size_t{16} << 20) + 1, '#'));
  EXPECT_EQ(error_of([&] { Config::load(test_schema(), path, {}); }),
            fmt::format("config file '{}' is larger than 16 MiB: not a config", path));
  EXPECT_EQ(error_of([&] { Config::load(test_schema(), "/dev/zero", {}); }),
            "config file '/dev/zero' is larger than 16 MiB: not a config");
}

TEST_F(ConfigFile, FileErrorComesBeforeOverrideError) {
  const std::string path = write("x.yaml", "steps: -1\n");
  EXPECT_EQ(error_of([&] { Config::load(test_schema(), path, {"model.layer=2"}); }),
            path + ":1: 'steps' = -1 is outside the allowed range [0, 1000000]");
}

TEST(ConfigFixture, ReadsExampleFile) {
  const Config config = Config::load(test_schema(), TESSERA_TEST_DATA_DIR "/config/example.yaml", {"steps=7"});
  EXPECT_EQ(config.integer("model.layers"), 12);
  EXPECT_EQ(config.string("model.norm"), "post");
  EXPECT_EQ(config.integer("model.attention.heads"), 16);
  EXPECT_EQ(config.real("optim.lr"), 1e-3);
  EXPECT_TRUE(config.boolean("optim.amsgrad"));
  EXPECT_EQ(config.integer("steps"), 7);
  EXPECT_EQ(config.real("model.dropout"), 0.1);
}

TEST(ConfigFixture, UnknownKeyInFile) {
  const std::string path = TESSERA_TEST_DATA_DIR "/config/unknown_key.yaml";
  EXPECT_EQ(error_of([&] { Config::load(test_schema(), path, {}); }),
            path + ":6: unknown key 'model.layer' (did you mean 'model.layers'?)");
}

// ---------------------------------------------------------------------------------------------
// Errors in YAML text: exact messages, 1-based lines

TEST(ConfigErrors, UnknownKeyWithNearestKey) {
  EXPECT_EQ(parse_error("model:\n  layers: 4\n  layer: 2\n"),
            "configs/x.yaml:3: unknown key 'model.layer' (did you mean 'model.layers'?)");
  EXPECT_EQ(parse_error("step: 3\n"), "configs/x.yaml:1: unknown key 'step' (did you mean 'steps'?)");
}

TEST(ConfigErrors, UnknownKeyInWrongSection) {
  EXPECT_EQ(parse_error("train:\n  seed: 1\n  lr: 0.1\n"),
            "configs/x.yaml:3: unknown key 'train.lr' (did you mean 'optim.lr'?)");
}

TEST(ConfigErrors, UnknownSection) {
  // A misspelt section holding keys: the first key's full path finds the hint.
  EXPECT_EQ(parse_error("modle:\n  layers: 3\n"),
            "configs/x.yaml:2: unknown key 'modle.layers' (did you mean 'model.layers'?)");
  // An empty one: sections are candidates too.
  EXPECT_EQ(parse_error("modle:\n"), "configs/x.yaml:1: unknown key 'modle' (did you mean 'model'?)");
}

// A merge key (yaml-cpp reads it as a key named "<<") is named as unsupported, not as unknown.
TEST(ConfigErrors, MergeKeysAreRefusedByName) {
  EXPECT_EQ(parse_error("model:\n  <<: {layers: 2}\n"),
            "configs/x.yaml:2: YAML merge keys ('<<') are not supported: write the keys out");
  EXPECT_EQ(parse_error("model:\n  \"<<\": 2\n"), "configs/x.yaml:2: unknown key 'model.<<'");  // quoted: a name
}

TEST(ConfigErrors, UnknownKeyWithoutHint) {
  EXPECT_EQ(parse_error("model:\n  vocabulary: 3\n"), "configs/x.yaml:2: unknown key 'model.vocabulary'");
  EXPECT_EQ(parse_error("steps: 3\nzzz: 1\n"), "configs/x.yaml:2: unknown key 'zzz'");
}

TEST(ConfigErrors, IntegerExpected) {
  EXPECT_EQ(parse_error("model:\n  layers: 2.5\n"), "configs/x.yaml:2: 'model.layers' expects an integer, got '2.5'");
  EXPECT_EQ(parse_error("model:\n  layers: abc\n"), "configs/x.yaml:2: 'model.layers' expects an integer, got 'abc'");
  EXPECT_EQ(parse_error("steps: true\n"), "configs/x.yaml:1: 'steps' expects an integer, got 'true'");
  EXPECT_EQ(parse_error("steps: 0x10\n"), "configs/x.yaml:1: 'steps' expects an integer, got '0x10'");
  EXPECT_EQ(parse_error("steps: +-5\n"), "configs/x.yaml:1: 'steps' expects an integer, got '+-5'");
}

// A whole number beyond int64, either way, written as digits or as a real: out of range, as a real
// past a double's range is (not "expects an integer", nor rounded to the int64 limit).
TEST(ConfigErrors, WholeNumbersBeyondInt64AreOutOfRange) {
  EXPECT_EQ(parse_error("", {"train.seed=1e30"}),
            "--set train.seed=1e30: 'train.seed' = 1e30 is outside the allowed range [-9223372036854775808, "
            "9223372036854775807]");  // a key without a range of its own
  EXPECT_EQ(parse_error("steps: 9223372036854775808\n"),
            "configs/x.yaml:1: 'steps' = 9223372036854775808 is outside the allowed range [0, 1000000]");
  EXPECT_EQ(parse_error("steps: -9223372036854775809\n"),
            "configs/x.yaml:1: 'steps' = -9223372036854775809 is outside the allowed range [0, 1000000]");
  EXPECT_EQ(parse_error("steps: -1e19\n"),
            "configs/x.yaml:1: 'steps' = -1e19 is outside the allowed range [0, 1000000]");
  EXPECT_EQ(parse_error("steps: 1e19.5\n"), "configs/x.yaml:1: 'steps' expects an integer, got '1e19.5'");
}

TEST(ConfigErrors, NumberExpected) {
  EXPECT_EQ(parse_error("model:\n  dropout: high\n"), "configs/x.yaml:2: 'model.dropout' expects a number, got 'high'");
  EXPECT_EQ(parse_error("optim:\n  lr: 1e-3x\n"), "configs/x.yaml:2: 'optim.lr' expects a number, got '1e-3x'");
}

TEST(ConfigErrors, BooleanExpected) {
  EXPECT_EQ(parse_error("optim:\n  amsgrad: yes\n"),
            "configs/x.yaml:2: 'optim.amsgrad' expects true or false, got 'yes'");
  EXPECT_EQ(parse_error("optim:\n  amsgrad: 1\n"), "configs/x.yaml:2: 'optim.amsgrad' expects true or false, got '1'");
}

TEST(ConfigErrors, StringExpected) {
  EXPECT_EQ(parse_error("train:\n  name: [a, b]\n"), "configs/x.yaml:2: 'train.name' expects a string, got a list");
}

TEST(ConfigErrors, OutsideRange) {
  EXPECT_EQ(parse_error("\n\nmodel:\n  layers: 0\n"),
            "configs/x.yaml:4: 'model.layers' = 0 is outside the allowed range [1, 64]");
  EXPECT_EQ(parse_error("model:\n  layers: 65\n"),
            "configs/x.yaml:2: 'model.layers' = 65 is outside the allowed range [1, 64]");
  EXPECT_EQ(parse_error("model:\n  dropout: 1.5\n"),
            "configs/x.yaml:2: 'model.dropout' = 1.5 is outside the allowed range [0.0, 1.0]");
  EXPECT_EQ(parse_error("model:\n  dropout: -0.001\n"),
            "configs/x.yaml:2: 'model.dropout' = -0.001 is outside the allowed range [0.0, 1.0]");
  EXPECT_EQ(parse_error("model:\n  dropout: .nan\n"),
            "configs/x.yaml:2: 'model.dropout' = .nan is outside the allowed range [0.0, 1.0]");
  // Past a double's range: a number all the same, out of range (not "expects a real number").
  EXPECT_EQ(parse_error("model:\n  dropout: 1e400\n"),
            "configs/x.yaml:2: 'model.dropout' = 1e400 is outside the allowed range [0.0, 1.0]");
  EXPECT_EQ(parse_error("model:\n  dropout: -1e400\n"),
            "configs/x.yaml:2: 'model.dropout' = -1e400 is outside the allowed range [0.0, 1.0]");
}

// A value too small for a double would round to zero, and 0 means "off" for some keys
// (train.lr_peak): refused, not rounded. An integer key does not take it either: 1e-400 is no integer.
TEST(ConfigErrors, UnderflowIsRefusedNotRoundedToZero) {
  EXPECT_EQ(parse_error("model:\n  dropout: 1e-400\n"),
            "configs/x.yaml:2: 'model.dropout' = 1e-400 is too small for a double: it would be 0");
  EXPECT_EQ(override_error("optim.lr=-2.5e-500"),
            "--set optim.lr=-2.5e-500: 'optim.lr' = -2.5e-500 is too small for a double: it would be 0");
  EXPECT_EQ(parse("model:\n  dropout: 0e-400\n").real("model.dropout"), 0.0);         // zero as written
  EXPECT_EQ(parse("model:\n  dropout: 4.9e-324\n").real("model.dropout"), 4.9e-324);  // the least subnormal
  EXPECT_EQ(override_error("model.layers=1e-400"),
            "--set model.layers=1e-400: 'model.layers' expects an integer, got '1e-400'");
}

// An integer key takes a whole number in any spelling, but only when it is whole as written: a
// fraction that rounds away in a double ("2.0000000000000001") is no integer; a whole number past
// a double's range is out of range.
TEST(ConfigErrors, IntegersAreWholeAsWritten) {
  EXPECT_EQ(parse_error("model:\n  layers: 2.0000000000000001\n"),
            "configs/x.yaml:2: 'model.layers' expects an integer, got '2.0000000000000001'");
  EXPECT_EQ(override_error("steps=1.00000000000000000001e3"),
            "--set steps=1.00000000000000000001e3: 'steps' expects an integer, got '1.00000000000000000001e3'");
  EXPECT_EQ(parse("steps: 1.5e1\n").integer("steps"), 15);
  EXPECT_EQ(parse("steps: 2500e-2\n").integer("steps"), 25);
  EXPECT_EQ(parse("steps: 0.000e-99999999999\n").integer("steps"), 0);
  EXPECT_EQ(parse_error("steps: 25e-1\n"), "configs/x.yaml:1: 'steps' expects an integer, got '25e-1'");
  EXPECT_EQ(parse_error("steps: 1e400\n"),
            "configs/x.yaml:1: 'steps' = 1e400 is outside the allowed range [0, 1000000]");
  // Read from the digits, never through a double: exact past 2^53, and at int64's ends.
  EXPECT_EQ(parse("", {"train.seed=9007199254740993.0"}).integer("train.seed"), 9007199254740993);
  EXPECT_EQ(parse("", {"train.seed=9223372036854775807.0"}).integer("train.seed"), INT64_MAX);
  EXPECT_EQ(parse("", {"train.seed=-922337203685477580.8e1"}).integer("train.seed"), INT64_MIN);
  EXPECT_EQ(parse("", {"train.seed=-0"}).integer("train.seed"), 0);
  EXPECT_EQ(override_error("train.seed=9223372036854775.808e3"),
            "--set train.seed=9223372036854775.808e3: 'train.seed' = 9223372036854775.808e3 is outside the allowed "
            "range [-9223372036854775808, 9223372036854775807]");
  EXPECT_EQ(parse("steps: 0e99999999999999999999\n").integer("steps"), 0);
}

// Every file call cuts a path at a NUL byte: another file than the one written would be read. (A
// --set cannot hold one: the command line is C strings.)
TEST(ConfigErrors, NulByteInAStringIsRefused) {
  EXPECT_EQ(parse_error("train:\n  name: \"run\\0x\"\n"), "configs/x.yaml:2: 'train.name' contains a NUL byte");
}

// An empty key name at the top would make its map the root again ("": {model: {layers: 3}}).
TEST(ConfigErrors, EmptyKeyName) {
  EXPECT_EQ(parse_error("\"\":\n  model:\n    layers: 3\n"), "configs/x.yaml:1: empty key name");
  EXPECT_EQ(parse_error("model:\n  '': 3\n"), "configs/x.yaml:2: empty key name");
}

// --set reads its value as a file's key would: text after a quoted value, or a second document,
// is an error, not dropped.
TEST(ConfigErrors, OverrideValueIsOneValueOnly) {
  EXPECT_NE(override_error("train.name=\"a\" \"b\"").find("--set train.name=\"a\" \"b\": invalid YAML value"),
            std::string::npos);
  EXPECT_NE(override_error("model.layers=\"3\" 4").find("--set model.layers=\"3\" 4: invalid YAML value"),
            std::string::npos);
  EXPECT_EQ(override_error("model.layers=3\n---\n5"),
            "--set model.layers=3\n---\n5: invalid YAML value: not one value (as a key in a file would take)");
  EXPECT_EQ(override_error("model.layers=3\nsteps: 4"),
            "--set model.layers=3\nsteps: 4: invalid YAML value: not one value (as a key in a file would take)");
  EXPECT_EQ(
      parse("", {"model.layers=\"3\"", "model.dropout=0.5 # a comment", "train.name='x y'"}).integer("model.layers"),
      3);
}

TEST(ConfigErrors, NotOneOfChoices) {
  EXPECT_EQ(parse_error("model:\n  layers: 4\n  norm: mid\n"),
            "configs/x.yaml:3: 'model.norm' = 'mid' is not one of: post, pre");
}

TEST(ConfigErrors, SectionWhereValueExpected) {
  EXPECT_EQ(parse_error("model:\n  layers:\n    deep: 3\n"),
            "configs/x.yaml:2: 'model.layers' expects an integer, got a map");
  EXPECT_EQ(parse_error("steps: [1, 2]\n"), "configs/x.yaml:1: 'steps' expects an integer, got a list");
  EXPECT_EQ(parse_error("model:\n  layers:\n  norm: pre\n"),
            "configs/x.yaml:2: 'model.layers' expects an integer, got an empty value");
}

TEST(ConfigErrors, ValueWhereSectionExpected) {
  EXPECT_EQ(parse_error("model: 3\n"), "configs/x.yaml:1: 'model' is a section and expects a map of keys, got '3'");
  EXPECT_EQ(parse_error("steps: 1\noptim:\n  - lr\n"),
            "configs/x.yaml:2: 'optim' is a section and expects a map of keys, got a list");
}

TEST(ConfigErrors, DuplicateKey) {
  EXPECT_EQ(parse_error("steps: 1\nsteps: 2\n"), "configs/x.yaml:2: duplicate key 'steps' (first set on line 1)");
  EXPECT_EQ(parse_error("model:\n  layers: 2\n  norm: pre\n  layers: 3\n"),
            "configs/x.yaml:4: duplicate key 'model.layers' (first set on line 2)");
  EXPECT_EQ(parse_error("model:\n  layers: 2\nmodel:\n  norm: pre\n"),
            "configs/x.yaml:3: duplicate key 'model' (first set on line 1)");
  // The same key, spelt dotted once and nested once.
  EXPECT_EQ(parse_error("model.layers: 2\nmodel:\n  layers: 3\n"),
            "configs/x.yaml:3: duplicate key 'model.layers' (first set on line 1)");
}

TEST(ConfigErrors, YamlSyntaxError) {
  EXPECT_EQ(parse_error("model:\n  layers: 2\n norm: pre\n"),
            "configs/x.yaml:3: YAML syntax error: end of map not found");
  EXPECT_EQ(parse_error("steps: 1\nmodel: {layers: 2\n"),
            "configs/x.yaml:3: YAML syntax error: end of map flow not found");
}

TEST(ConfigErrors, TopLevelMustBeAMap) {
  EXPECT_EQ(parse_error("just text\n"), "configs/x.yaml:1: expected a map of keys at the top level, got 'just text'");
  EXPECT_EQ(parse_error("- steps: 1\n"), "configs/x.yaml:1: expected a map of keys at the top level, got a list");
}

// A corpus or a binary file given as the config: the error quotes the start of the value, with
// control bytes escaped, not all of it (a 100,000-character line went whole into one message).
TEST(ConfigErrors, QuotedValuesAreShortAndPrintable) {
  const std::string line(100000, 'a');
  EXPECT_EQ(parse_error(line + "\n"), "configs/x.yaml:1: expected a map of keys at the top level, got '" +
                                          std::string(60, 'a') + "... (100000 bytes)'");
  // Cut at a character boundary: 59 bytes, then a two-byte character that would end past 60.
  EXPECT_EQ(
      parse_error(std::string(59, 'a') + "\xC3\xA9tail\n"),
      "configs/x.yaml:1: expected a map of keys at the top level, got '" + std::string(59, 'a') + "... (65 bytes)'");
  EXPECT_EQ(override_error("model.norm=a\tb"),
            "--set model.norm=a\tb: 'model.norm' = 'a\\x09b' is not one of: post, pre");
  EXPECT_EQ(parse_error("\"\\\x01\"\n"), "configs/x.yaml:1: YAML syntax error: unknown escape character: \\x01");
}

TEST(ConfigErrors, OneDocumentOnly) {
  EXPECT_EQ(parse_error("steps: 1\n---\nsteps: 2\n"), "configs/x.yaml:3: expected one YAML document, found 2");
}

// yaml-cpp 0.7 reads some malformed text without end (a ',' at the top level), adding documents
// until memory runs out: found by fuzzing, refused instead, in a file and in --set.
TEST(ConfigErrors, TextTheYamlLibraryReadsWithoutEndIsRefused) {
  const std::string endless =
      "YAML syntax error: more than 16 documents, or text the YAML library reads without end (a ',' at the top "
      "level, say)";
  EXPECT_EQ(parse_error(","), "configs/x.yaml:1: " + endless);
  EXPECT_EQ(parse_error("{model: {layers: 2}}\n, x\n"), "configs/x.yaml:2: " + endless);
  EXPECT_EQ(override_error("model.layers=3\n---\n,"),
            "--set model.layers=3\n---\n,: invalid YAML value: " + endless.substr(19));
  std::string documents = "steps: 1\n";
  for (int i = 2; i <= 16; ++i) documents += "---\nsteps: 1\n";
  EXPECT_EQ(parse_error(documents), "configs/x.yaml:3: expected one YAML document, found 16");
  EXPECT_EQ(parse_error(documents + "---\nsteps: 1\n"), "configs/x.yaml:32: " + endless);
}

TEST(ConfigErrors, KeyMustBeAName) {
  EXPECT_EQ(parse_error("? [a, b]\n: 1\n"), "configs/x.yaml:1: expected a key name, got a list");
}

// ---------------------------------------------------------------------------------------------
// Errors in --set overrides

TEST(ConfigOverrideErrors, UnknownKey) {
  EXPECT_EQ(override_error("model.layer=2"),
            "--set model.layer=2: unknown key 'model.layer' (did you mean 'model.layers'?)");
  EXPECT_EQ(override_error("nothing=2"), "--set nothing=2: unknown key 'nothing'");
}

TEST(ConfigOverrideErrors, NotKeyValue) {
  EXPECT_EQ(override_error("model.layers"), "--set model.layers: expected KEY=VALUE");
  EXPECT_EQ(override_error("=3"), "--set =3: expected KEY=VALUE");
}

TEST(ConfigOverrideErrors, SectionIsNotAKey) {
  EXPECT_EQ(override_error("model=3"), "--set model=3: 'model' is a section, not a key");
}

TEST(ConfigOverrideErrors, BadValue) {
  EXPECT_EQ(override_error("model.layers=2.5"), "--set model.layers=2.5: 'model.layers' expects an integer, got '2.5'");
  EXPECT_EQ(override_error("model.layers=0"),
            "--set model.layers=0: 'model.layers' = 0 is outside the allowed range [1, 64]");
  EXPECT_EQ(override_error("model.norm=mid"), "--set model.norm=mid: 'model.norm' = 'mid' is not one of: post, pre");
  EXPECT_EQ(override_error("optim.amsgrad=on"),
            "--set optim.amsgrad=on: 'optim.amsgrad' expects true or false, got 'on'");
  EXPECT_EQ(override_error("steps=[1]"), "--set steps=[1]: 'steps' expects an integer, got a list");
  EXPECT_EQ(override_error("model.layers="),
            "--set model.layers=: 'model.layers' expects an integer, got an empty value");
  EXPECT_EQ(override_error("model.norm="), "--set model.norm=: 'model.norm' = '' is not one of: post, pre");
  EXPECT_EQ(override_error("steps=[1"), "--set steps=[1: invalid YAML value: end of sequence flow not found");
}

// ---------------------------------------------------------------------------------------------
// Typed getters

TEST(ConfigGetters, UnknownKey) {
  const Config config = parse("");
  EXPECT_EQ(error_of([&] { config.integer("model.layer"); }),
            "unknown config key 'model.layer' (did you mean 'model.layers'?)");
  EXPECT_EQ(error_of([&] { config.string("model"); }), "unknown config key 'model'");
  EXPECT_EQ(error_of([] { Config().real("optim.lr"); }), "unknown config key 'optim.lr'");
}

TEST(ConfigGetters, TypeMismatch) {
  const Config config = parse("");
  EXPECT_EQ(error_of([&] { config.integer("model.norm"); }), "config key 'model.norm' is a string, not an integer");
  EXPECT_EQ(error_of([&] { config.real("model.layers"); }),
            "config key 'model.layers' is an integer, not a real number");
  EXPECT_EQ(error_of([&] { config.boolean("optim.lr"); }), "config key 'optim.lr' is a real number, not a boolean");
  EXPECT_EQ(error_of([&] { config.string("optim.amsgrad"); }), "config key 'optim.amsgrad' is a boolean, not a string");
}

// ---------------------------------------------------------------------------------------------
// to_yaml

TEST(ConfigYaml, DefaultsInSchemaOrder) {
  EXPECT_EQ(parse("").to_yaml(false),
            "model:\n"
            "  layers: 6\n"
            "  norm: pre\n"
            "  dropout: 0.1\n"
            "  attention:\n"
            "    heads: 8\n"
            "optim:\n"
            "  lr: 0.0003\n"
            "  amsgrad: false\n"
            "train:\n"
            "  seed: 1234\n"
            "  name: demo\n"
            "steps: 1000\n");
}

TEST(ConfigYaml, WithDocs) {
  EXPECT_EQ(parse("").to_yaml(true),
            "model:\n"
            "  layers: 6  # number of layers [1, 64]\n"
            "  norm: pre  # layer norm placement [one of: post, pre]\n"
            "  dropout: 0.1  # dropout probability [0.0, 1.0]\n"
            "  attention:\n"
            "    heads: 8  # attention heads [1, 128]\n"
            "optim:\n"
            "  lr: 0.0003  # learning rate [0.0, 10.0]\n"
            "  amsgrad: false  # AMSGrad variant of Adam\n"
            "train:\n"
            "  seed: 1234  # random seed\n"
            "  name: demo  # run name\n"
            "steps: 1000  # training steps [0, 1000000]\n");
}

TEST(ConfigYaml, SectionsGroupedInOrderOfFirstKey) {
  Schema schema;
  schema.integer("a.x", 1, 0, 9, "").integer("b.y", 2, 0, 9, "").integer("a.z", 3, 0, 9, "");
  const Config config = Config::parse(schema, "", "inline");
  EXPECT_EQ(config.to_yaml(false), "a:\n  x: 1\n  z: 3\nb:\n  y: 2\n");
  EXPECT_EQ(Config::parse(schema, config.to_yaml(true), "inline").to_yaml(false), config.to_yaml(false));
}

TEST(ConfigYaml, KeysThatLookLikeOtherScalars) {
  Schema schema;
  schema.integer("null.true", 1, 0, 9, "").integer("null.1", 2, 0, 9, "").string("on.y", "n", {}, "");
  const Config config = Config::parse(schema, "", "inline");
  EXPECT_EQ(config.to_yaml(false), "\"null\":\n  true: 1\n  1: 2\non:\n  y: \"n\"\n");
  EXPECT_EQ(Config::parse(schema, config.to_yaml(true), "inline").to_yaml(false), config.to_yaml(false));
}

TEST(ConfigYaml, RoundTripsDefaults) {
  const Config config = parse("");
  expect_same(parse(config.to_yaml(false)), config);
  expect_same(parse(config.to_yaml(true)), config);
}

TEST(ConfigYaml, RoundTripsRealsExactly) {
  for (const double x : {0.1 + 0.2, 1.0 / 3.0, 5e-324, 1e-300, 2.0 / 3.0 * 1e-5, 9.999999999999998, 10.0, 0.0, -0.0}) {
    SCOPED_TRACE(fmt::format("{}", x));
    const Config config = parse("", {fmt::format("optim.lr={:.17g}", x)});
    ASSERT_EQ(config.real("optim.lr"), x);
    const Config again = parse(config.to_yaml(true));
    EXPECT_EQ(again.real("optim.lr"), x);
    EXPECT_EQ(std::signbit(again.real("optim.lr")), std::signbit(x));
  }
}

TEST(ConfigYaml, RoundTripsInfinityAndNan) {
  Schema schema;
  schema.real("any", 0, 1, 0, "no range");
  for (const std::string text : {".inf", "-.inf", ".nan", "+.Inf", ".NaN"}) {
    SCOPED_TRACE(text);
    const Config config = Config::parse(schema, "any: " + text + "\n", "inline");
    const Config again = Config::parse(schema, config.to_yaml(true), "inline");
    const double x = config.real("any"), y = again.real("any");
    EXPECT_TRUE(x == y || (std::isnan(x) && std::isnan(y)));
    EXPECT_EQ(config.to_yaml(false), again.to_yaml(false));
  }
  EXPECT_EQ(Config::parse(schema, "any: -.INF", "inline").to_yaml(false), "any: -.inf\n");
}

TEST(ConfigYaml, RoundTripsStringsThatNeedQuotes) {
  for (const std::string name : {"yes",
                                 "null",
                                 "",
                                 "3",
                                 "1e5",
                                 "a: b # c",
                                 "line\nbreak\ttab",
                                 "quote\" back\\slash",
                                 "  padded  ",
                                 "#x",
                                 "- item",
                                 "[x]",
                                 "\x01",
                                 "ünïcode",
                                 "True",
                                 "~",
                                 "data/train.en",
                                 ".hidden",
                                 "@at",
                                 "*star",
                                 "&amp"}) {
    SCOPED_TRACE(name);
    Schema schema;
    schema.string("train.name", name, {}, "run \"name\" # with: symbols");
    const Config original = Config::parse(schema, "", "inline");
    const Config again = Config::parse(schema, original.to_yaml(true), "inline");
    EXPECT_EQ(again.string("train.name"), name);
    const Config plain = Config::parse(schema, original.to_yaml(false), "inline");
    EXPECT_EQ(plain.string("train.name"), name);
  }
}

TEST(ConfigYaml, RoundTripsEveryKind) {
  const Config config = parse(
      "model:\n"
      "  layers: 64\n"
      "  norm: post\n"
      "  dropout: 0.30000000000000004\n"
      "  attention: {heads: 1}\n"
      "optim: {lr: 1e-7, amsgrad: true}\n"
      "train:\n"
      "  seed: -9223372036854775808\n"
      "  name: 'yes: no'\n"
      "steps: 0\n");
  const std::string plain = config.to_yaml(false);
  EXPECT_EQ(plain,
            "model:\n"
            "  layers: 64\n"
            "  norm: post\n"
            "  dropout: 0.30000000000000004\n"
            "  attention:\n"
            "    heads: 1\n"
            "optim:\n"
            "  lr: 1e-07\n"
            "  amsgrad: true\n"
            "train:\n"
            "  seed: -9223372036854775808\n"
            "  name: \"yes: no\"\n"
            "steps: 0\n");
  expect_same(parse(plain), config);
  expect_same(parse(config.to_yaml(true)), config);
}

// Each key remembers where it was set (the file's line, or the --set that set it last), so that an
// error about keys that clash names where to change them; keys left at their default say nothing.
TEST(Config, OriginsNameTheLineOrTheOverrideThatSetEachKey) {
  const Config c =
      parse("model:\n  layers: 3\n\n  attention: {heads: 2}\nsteps: 5\n", {"steps=7", "optim.lr=0.1", "steps=9"});
  EXPECT_EQ(c.origin("model.layers"), "configs/x.yaml:2");
  EXPECT_EQ(c.origin("model.attention.heads"), "configs/x.yaml:4");
  EXPECT_EQ(c.origin("steps"), "--set steps=9");
  EXPECT_EQ(c.origin("optim.lr"), "--set optim.lr=0.1");
  EXPECT_EQ(c.origin("model.norm"), "");
  EXPECT_EQ(c.where({"model.layers", "model.norm", "steps"}), "configs/x.yaml:2, --set steps=9");
  EXPECT_EQ(c.where({"model.layers", "model.layers"}), "configs/x.yaml:2");
  EXPECT_EQ(c.where({"model.norm", "train.seed"}), "config");
}

}  // namespace
}  // namespace tessera::io

namespace tessera::io {
namespace {

// ---- Tessera's own schema, read into typed structs (io/run_config.h)
TEST(RunConfig, FieldsHoldTheValuesTheYamlGives) {
  const RunConfig cfg = RunConfig::parse(
      "model:\n  layers: 3\n  norm: pre\ndata:\n  task: reverse\ntrain:\n  seed: 4294967295\n  lr_schedule: linear\n"
      "  best_metric: ppl\n  precision: bf16\n  device: cuda\ndecode:\n  length_penalty: 1.5\n",
      "x.yaml", {"parallel.tensor=2", "output.dir=/tmp/run"});
  EXPECT_EQ(cfg.model.layers, 3);
  EXPECT_EQ(cfg.model.norm, Norm::pre);
  EXPECT_EQ(cfg.model.d_model, 512);  // a default
  EXPECT_EQ(cfg.data.task, Task::reverse);
  EXPECT_TRUE(cfg.data.synthetic());
  EXPECT_EQ(cfg.train.seed, 4294967295u);
  EXPECT_EQ(cfg.train.lr_schedule, LrSchedule::linear);
  EXPECT_EQ(cfg.train.best_metric, BestMetric::ppl);
  EXPECT_EQ(cfg.train.precision, Precision::bf16);
  EXPECT_EQ(cfg.train.device, Device::cuda);
  EXPECT_EQ(cfg.decode.length_penalty, 1.5);
  EXPECT_EQ(cfg.parallel.tensor, 2);
  EXPECT_EQ(cfg.output.dir, "/tmp/run");
  EXPECT_EQ(cfg.source().origin("parallel.tensor"), "--set parallel.tensor=2");
}

TEST(RunConfig, EveryChoiceOfTheSchemaMapsToAValue) {
  // A choice the schema allows but the table's enum does not name fails to read (a logic_error).
  for (const KeySpec& spec : run_schema().keys())
    for (const std::string& choice : spec.choices)
      EXPECT_NO_THROW(RunConfig::parse("", "x.yaml", {spec.key + "=" + choice})) << spec.key << " = " << choice;
}

TEST(RunConfig, KeyCombinationsAreCheckedInOnePlaceNamingWhereEachWasSet) {
  const auto error_of = [](const std::string& yaml, std::vector<std::string> overrides) {
    try {
      check_key_combinations(RunConfig::parse(yaml, "configs/x.yaml", overrides));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("train:\n  patience: 3\n", {"train.valid_every=0"}),
            "configs/x.yaml:2, --set train.valid_every=0: train.patience = 3 counts validations during training, but "
            "train.valid_every is 0 (only one at the end): set train.valid_every");
  EXPECT_NE(error_of("data:\n  task: reverse\n  synthetic_min_len: 9\n  synthetic_max_len: 8\n", {})
                .find("configs/x.yaml:3, configs/x.yaml:4: data.synthetic_min_len = 9 exceeds"),
            std::string::npos);
  EXPECT_NE(error_of("", {"data.train_src=a", "data.train_tgt=b", "data.valid_src=c"})
                .find("data.task is 'translation' but data.valid_tgt is not set"),
            std::string::npos);
  EXPECT_NE(error_of("", {"data.task=copy", "data.synthetic_max_len=1024"})
                .find("data.synthetic_max_len = 1024 needs model.max_positions >= 1025"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"data.task=copy"}), "");
}

}  // namespace
}  // namespace tessera::io
