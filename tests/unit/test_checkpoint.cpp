// HDF5 checkpoints: exact round trips, checksums, and every failure we can produce named clearly
// without losing the previous file.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <zlib.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <tuple>

#include "io/checkpoint.h"
#include "optim/adam.h"
#include "unit/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A fresh folder per test, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("tessera_ckpt_{}_{}", ::getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

Tensor filled(const Shape& shape, float start) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + 0.37f * static_cast<float>(i);
  return t;
}

io::Checkpoint sample_checkpoint() {
  io::Checkpoint c;
  c.step = 42;
  c.config_yaml = "model:\n  layers: 2\n";
  c.model = {{"encoder.layers.0.fc1.weight", filled({3, 4}, 1.0f)}, {"embed_tokens.weight", filled({5, 2}, -2.0f)}};
  c.exp_avg = {{"encoder.layers.0.fc1.weight", filled({3, 4}, 0.5f)}, {"embed_tokens.weight", filled({5, 2}, 0.25f)}};
  c.exp_avg_sq = {{"encoder.layers.0.fc1.weight", filled({3, 4}, 9.0f)}, {"embed_tokens.weight", filled({5, 2}, 7.0f)}};
  c.state = io::TrainingState{.step = 42,
                              .epoch = 3,
                              .position = 17,
                              .shuffle_seed = 4294967295u,
                              .dropout_seed = 12345,
                              .optimizer_step = 42,
                              .learning_rate = 1.25e-4,
                              .elapsed_seconds = 61.5,
                              .best_valid = 27.5,
                              .best_valid_step = 40,
                              .validations_since_best = 3,
                              .last_validated_step = 38,
                              .train_fingerprint = 0xfedcba9876543210ULL};
  // Any bytes: zeros, high bytes, an empty one.
  c.vocabularies = {{"src", std::string("\x0a\x00\xff\x80model", 9)}, {"tgt", ""}};
  return c;
}

void expect_same(const io::TensorMap& a, const io::TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.shape(), u.shape()) << name;
    EXPECT_EQ(std::memcmp(t.raw_data(), u.raw_data(), static_cast<std::size_t>(t.numel()) * sizeof(float)), 0) << name;
  }
}

// The file offset of a dataset's data (contiguous layout), to corrupt it on purpose.
haddr_t dataset_offset(const std::string& file, const std::string& dataset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t off = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return off;
}

TEST_F(CheckpointTest, FullCheckpointRoundTripsExactly) {
  const io::Checkpoint c = sample_checkpoint();
  io::save_checkpoint(path("c.h5"), c);
  EXPECT_FALSE(fs::exists(path("c.h5.tmp")));
  const io::Checkpoint r = io::load_checkpoint(path("c.h5"));
  EXPECT_EQ(r.step, 42);
  EXPECT_EQ(r.config_yaml, c.config_yaml);
  expect_same(c.model, r.model);
  expect_same(c.exp_avg, r.exp_avg);
  expect_same(c.exp_avg_sq, r.exp_avg_sq);
  ASSERT_TRUE(r.state.has_value());
  EXPECT_EQ(r.state->epoch, 3);
  EXPECT_EQ(r.state->position, 17);
  EXPECT_EQ(r.state->shuffle_seed, 4294967295u);
  EXPECT_EQ(r.state->dropout_seed, 12345u);
  EXPECT_EQ(r.state->optimizer_step, 42);
  EXPECT_EQ(r.state->learning_rate, 1.25e-4);
  EXPECT_EQ(r.state->elapsed_seconds, 61.5);
  EXPECT_EQ(r.state->best_valid, 27.5);
  EXPECT_EQ(r.state->best_valid_step, 40);
  EXPECT_EQ(r.state->validations_since_best, 3);
  EXPECT_EQ(r.state->last_validated_step, 38);
  EXPECT_EQ(r.state->train_fingerprint, 0xfedcba9876543210ULL);  // all 64 bits, the top one too
  EXPECT_EQ(r.vocabularies, c.vocabularies);
}

// validations_since_best (train.patience) and last_validated_step came after format 2: a file
// without them loads, counting from 0, with no validation pending (the last at its step).
TEST_F(CheckpointTest, AFileWithoutTheValidationCountLoadsWithZero) {
  io::save_checkpoint(path("old.h5"), sample_checkpoint());
  const hid_t f = H5Fopen(path("old.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t g = H5Gopen2(f, "train", H5P_DEFAULT);
  ASSERT_GE(H5Adelete(g, "validations_since_best"), 0);
  ASSERT_GE(H5Adelete(g, "last_validated_step"), 0);
  ASSERT_GE(H5Adelete(g, "crc32"), 0);  // newer still
  H5Gclose(g);
  H5Fclose(f);
  const io::Checkpoint r = io::load_checkpoint(path("old.h5"));
  ASSERT_TRUE(r.state.has_value());
  EXPECT_EQ(r.state->validations_since_best, 0);
  EXPECT_EQ(r.state->last_validated_step, r.state->step);
  EXPECT_EQ(r.state->best_valid_step, 40);
}

TEST_F(CheckpointTest, WeightsOnlyFilesAndWeightsOnlyLoads) {
  io::Checkpoint c = sample_checkpoint();
  io::save_checkpoint(path("full.h5"), c);
  const io::Checkpoint w = io::load_checkpoint(path("full.h5"), /*weights_only=*/true);
  expect_same(c.model, w.model);
  EXPECT_TRUE(w.exp_avg.empty());
  c.exp_avg.clear();
  c.exp_avg_sq.clear();
  c.state.reset();
  io::save_checkpoint(path("weights.h5"), c);
  const io::Checkpoint r = io::load_checkpoint(path("weights.h5"));
  expect_same(c.model, r.model);
  EXPECT_TRUE(r.exp_avg.empty());
  EXPECT_FALSE(r.state.has_value());
}

// A weights-only load (translate) reads the vocabularies too; a file without /vocab (a synthetic
// task, or written before checkpoints held it) has none.
TEST_F(CheckpointTest, VocabulariesAreReadWithTheWeightsAndMayBeAbsent) {
  io::Checkpoint c = sample_checkpoint();
  io::save_checkpoint(path("c.h5"), c);
  EXPECT_EQ(io::load_checkpoint(path("c.h5"), /*weights_only=*/true).vocabularies, c.vocabularies);
  EXPECT_EQ(io::load_vocabularies(path("c.h5")), c.vocabularies);
  c.vocabularies.clear();
  io::save_checkpoint(path("none.h5"), c);
  EXPECT_TRUE(io::load_checkpoint(path("none.h5")).vocabularies.empty());
  EXPECT_TRUE(io::load_vocabularies(path("none.h5")).empty());
  const hid_t f = H5Fopen(path("none.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_EQ(H5Lexists(f, "vocab", H5P_DEFAULT), 0);
  H5Fclose(f);
}

TEST_F(CheckpointTest, CorruptedVocabularyFailsItsChecksum) {
  io::save_checkpoint(path("c.h5"), sample_checkpoint());
  const haddr_t off = dataset_offset(path("c.h5"), "/vocab/src");
  ASSERT_NE(off, HADDR_UNDEF);
  {
    std::fstream f(path("c.h5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(off + 4));
    f.put('M');  // was 'm'
  }
  const std::string msg = error_of([&] { io::load_checkpoint(path("c.h5"), /*weights_only=*/true); });
  EXPECT_NE(msg.find(fmt::format("checkpoint '{}': dataset '/vocab/src' fails its checksum", path("c.h5"))),
            std::string::npos)
      << msg;
}

// An average keeps the vocabularies; files trained with others are refused, files without any (an
// earlier build's) are not.
TEST_F(CheckpointTest, AverageKeepsTheVocabulariesAndRefusesOthers) {
  io::Checkpoint a = sample_checkpoint(), b = sample_checkpoint(), old = sample_checkpoint();
  b.model["embed_tokens.weight"] = filled({5, 2}, 4.0f);
  old.vocabularies.clear();
  io::save_checkpoint(path("a.h5"), a);
  io::save_checkpoint(path("b.h5"), b);
  io::save_checkpoint(path("old.h5"), old);
  EXPECT_EQ(io::average_checkpoints({path("a.h5"), path("b.h5")}).vocabularies, a.vocabularies);
  EXPECT_EQ(io::average_checkpoints({path("old.h5"), path("a.h5")}).vocabularies, a.vocabularies);
  b.vocabularies["tgt"] = "other";
  io::save_checkpoint(path("b.h5"), b);
  EXPECT_EQ(
      error_of([&] {
        io::average_checkpoints({path("a.h5"), path("old.h5"), path("b.h5")});
      }),
      fmt::format("average: '{}' was trained with other vocabularies (/vocab) than '{}'", path("b.h5"), path("a.h5")));
  // Named: the file the vocabularies came from, not a first file without any.
  EXPECT_EQ(
      error_of([&] {
        io::average_checkpoints({path("old.h5"), path("a.h5"), path("b.h5")});
      }),
      fmt::format("average: '{}' was trained with other vocabularies (/vocab) than '{}'", path("b.h5"), path("a.h5")));
}

// The mean of each element, accumulated in float64 and rounded once to float32; a weights-only
// result with the first file's config, the largest step (the newest input's, in any order) and no
// optimizer state.
TEST_F(CheckpointTest, AverageIsTheElementwiseMean) {
  std::vector<std::string> files;
  std::vector<io::Checkpoint> inputs;
  for (int i = 0; i < 3; ++i) {
    io::Checkpoint c = sample_checkpoint();
    c.step = 10 * (i + 1);
    c.config_yaml = fmt::format("model:\n  layers: {}\n", i + 1);
    for (auto& [name, t] : c.model) {
      float* d = t.data<float>();
      // Values whose float32 sum would round: 1 + a few ulps, and spread signs.
      for (std::int64_t j = 0; j < t.numel(); ++j)
        d[j] =
            (j % 2 == 0 ? 1.0f : -3.0f) + static_cast<float>((i + 1) * (j + 1)) * 1.1920929e-7f + static_cast<float>(i);
    }
    files.push_back(path(fmt::format("in{}.h5", i)));
    io::save_checkpoint(files.back(), c);
    inputs.push_back(std::move(c));
  }
  const io::Checkpoint avg = io::average_checkpoints(files);
  EXPECT_EQ(avg.step, 30);
  EXPECT_EQ(avg.config_yaml, inputs[0].config_yaml);
  EXPECT_TRUE(avg.exp_avg.empty() && avg.exp_avg_sq.empty() && !avg.state.has_value());
  ASSERT_EQ(avg.model.size(), inputs[0].model.size());
  for (const auto& [name, t] : avg.model) {
    ASSERT_EQ(t.shape(), inputs[0].model.at(name).shape()) << name;
    for (std::int64_t j = 0; j < t.numel(); ++j) {
      double sum = 0;
      for (const io::Checkpoint& c : inputs) sum += static_cast<double>(c.model.at(name).data<float>()[j]);
      EXPECT_EQ(t.data<float>()[j], static_cast<float>(sum / 3.0)) << name << "[" << j << "]";
    }
  }
  EXPECT_EQ(io::average_checkpoints({files[2], files[0]}).step, 30);
  EXPECT_EQ(io::average_checkpoints({files[1], files[0]}).step, 20);
  // The first two of them: another mean (not the first file's weights).
  const io::Checkpoint two = io::average_checkpoints({files[0], files[1]});
  const float* first = inputs[0].model.at("embed_tokens.weight").data<float>();
  const float* second = inputs[1].model.at("embed_tokens.weight").data<float>();
  EXPECT_EQ(two.model.at("embed_tokens.weight").data<float>()[0],
            static_cast<float>((static_cast<double>(first[0]) + second[0]) / 2.0));
  EXPECT_NE(two.model.at("embed_tokens.weight").data<float>()[0], first[0]);
}

// Files whose tensors do not match name the tensor, whichever file lacks it.
TEST_F(CheckpointTest, AverageNamesTheTensorThatDoesNotMatch) {
  io::Checkpoint a = sample_checkpoint(), fewer = sample_checkpoint(), other = sample_checkpoint();
  ASSERT_TRUE(fewer.model.contains("embed_tokens.weight"));
  fewer.model.erase("embed_tokens.weight");
  other.model["embed_tokens.weight"] = filled({6, 2}, 1.0f);
  io::save_checkpoint(path("a.h5"), a);
  io::save_checkpoint(path("fewer.h5"), fewer);
  io::save_checkpoint(path("other.h5"), other);
  EXPECT_EQ(
      error_of([&] {
        io::average_checkpoints({path("a.h5"), path("fewer.h5")});
      }),
      fmt::format("average: '{}' has no '/model/embed_tokens.weight', which '{}' has", path("fewer.h5"), path("a.h5")));
  EXPECT_EQ(error_of([&] {
              io::average_checkpoints({path("fewer.h5"), path("a.h5")});
            }),
            fmt::format("average: '{}' has '/model/embed_tokens.weight', which '{}' does not have", path("a.h5"),
                        path("fewer.h5")));
  EXPECT_EQ(error_of([&] {
              io::average_checkpoints({path("a.h5"), path("other.h5")});
            }),
            fmt::format("average: '/model/embed_tokens.weight' has shape [6, 2] in '{}' but [5, 2] in '{}'",
                        path("other.h5"), path("a.h5")));
}

TEST_F(CheckpointTest, LargeTensorsRoundTrip) {
  io::Checkpoint c;
  c.model = {{"big", filled({3, 1 << 21}, 0.0f)}};  // 24 MiB
  io::save_checkpoint(path("big.h5"), c);
  expect_same(c.model, io::load_checkpoint(path("big.h5")).model);
}

// The stored checksum is zlib's CRC-32 (what Python's zlib.crc32 gives), whatever computes it.
TEST(CheckpointChecksum, IsZlibsCrc32) {
  std::vector<unsigned char> bytes(3'000'001);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{4096}, bytes.size()})
    EXPECT_EQ(io::checksum(bytes.data(), n), crc32_z(0L, bytes.data(), n)) << n << " bytes";
  EXPECT_EQ(io::checksum("123456789", 9), 0xCBF43926u);  // the CRC-32 check value
}

TEST_F(CheckpointTest, MissingAndNonHdf5FilesAreNamed) {
  EXPECT_EQ(error_of([&] { io::load_checkpoint(path("none.h5")); }),
            fmt::format("checkpoint '{}' does not exist", path("none.h5")));
  std::ofstream(path("text.h5")) << "not a checkpoint\n";
  EXPECT_EQ(error_of([&] { io::load_checkpoint(path("text.h5")); }),
            fmt::format("checkpoint '{}' is not an HDF5 file (empty, truncated or corrupted?)", path("text.h5")));
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir_.string()); }),
            fmt::format("checkpoint '{}' is a folder, not a file", dir_.string()));
}

TEST_F(CheckpointTest, TruncatedFileIsRejected) {
  io::save_checkpoint(path("c.h5"), sample_checkpoint());
  const auto size = fs::file_size(path("c.h5"));
  for (const std::uintmax_t keep : {size - 16, size / 2, std::uintmax_t{100}}) {
    fs::copy_file(path("c.h5"), path("cut.h5"), fs::copy_options::overwrite_existing);
    fs::resize_file(path("cut.h5"), keep);
    const std::string msg = error_of([&] { io::load_checkpoint(path("cut.h5")); });
    EXPECT_NE(msg.find(fmt::format("checkpoint '{}'", path("cut.h5"))), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("corrupted") != std::string::npos) << msg;
  }
}

TEST_F(CheckpointTest, CorruptedDataFailsItsChecksum) {
  io::save_checkpoint(path("c.h5"), sample_checkpoint());
  const haddr_t off = dataset_offset(path("c.h5"), "/optimizer/exp_avg_sq/embed_tokens.weight");
  ASSERT_NE(off, HADDR_UNDEF);
  {
    std::fstream f(path("c.h5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(off + 5));
    f.put('\x5a');
  }
  const std::string msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
  EXPECT_NE(msg.find(fmt::format("checkpoint '{}': dataset '/optimizer/exp_avg_sq/embed_tokens.weight' fails its "
                                 "checksum",
                                 path("c.h5"))),
            std::string::npos)
      << msg;
  // A weights-only load does not read the optimizer group, so it still succeeds.
  EXPECT_EQ(io::load_checkpoint(path("c.h5"), true).model.size(), 2u);
}

// A damaged file whose dataset claims a shape beyond its bytes (here: one declared, never written)
// is refused naming the dataset, before memory is taken for it (it was an allocation failure of
// 256 GiB that named nothing); a dataset of integers is named too.
TEST_F(CheckpointTest, ShapesBeyondTheFileAndIntegerDatasetsAreNamed) {
  const auto replace = [&](const char* name, hid_t type, const std::vector<hsize_t>& dims) {
    io::save_checkpoint(path("c.h5"), sample_checkpoint());
    const hid_t f = H5Fopen(path("c.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, name, H5P_DEFAULT), 0);
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t ds = H5Dcreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(f);
  };
  replace("/optimizer/exp_avg/embed_tokens.weight", H5T_IEEE_F32LE, {16, 4294967328ULL});
  std::string msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
  EXPECT_NE(msg.find(fmt::format("checkpoint '{}': dataset '/optimizer/exp_avg/embed_tokens.weight' claims the shape "
                                 "[16, 4294967328], more than the file's",
                                 path("c.h5"))),
            std::string::npos)
      << msg;
  // A vocabulary's bytes alike.
  replace("/vocab/src", H5T_STD_U8LE, {68719476736ULL});
  msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
  EXPECT_NE(msg.find("dataset '/vocab/src' claims the shape [68719476736], more than the file's"), std::string::npos)
      << msg;
  replace("/model/embed_tokens.weight", H5T_STD_I32LE, {5, 2});
  msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
  EXPECT_NE(msg.find("dataset '/model/embed_tokens.weight' is not floating point"), std::string::npos) << msg;
}

// Every attribute a checkpoint holds is one value. A damaged or crafted file whose attribute holds
// more is refused naming it, for each kind of attribute (HDF5 would write all of them into the
// memory of one: found by fuzzing, a stack or heap overflow); so is a string of variable length.
TEST_F(CheckpointTest, AttributesOfMoreThanOneValueAreRefused) {
  const auto replace_attr = [&](const char* object, const char* name, hid_t type, hsize_t count) {
    io::save_checkpoint(path("c.h5"), sample_checkpoint());
    const hid_t f = H5Fopen(path("c.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t obj = H5Oopen(f, object, H5P_DEFAULT);
    ASSERT_GE(H5Adelete(obj, name), 0);
    const hid_t space = count == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr);
    const hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(a, 0);
    const std::vector<char> zeros(count * 64 + 64, 0);
    if (H5Tis_variable_str(type) > 0) {
      const char* text = "model:\n  layers: 2\n";
      ASSERT_GE(H5Awrite(a, type, &text), 0);
    } else {
      ASSERT_GE(H5Awrite(a, type, zeros.data()), 0);
    }
    H5Aclose(a);
    H5Sclose(space);
    H5Oclose(obj);
    H5Fclose(f);
  };
  const auto expect_refused = [&](const std::string& what) {
    try {
      io::load_checkpoint(path("c.h5"));
      ADD_FAILURE() << what << " was not refused";
    } catch (const io::DamagedCheckpoint& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("checkpoint '{}': {}", path("c.h5"), what)), std::string::npos)
          << e.what();
    } catch (const Error& e) {
      ADD_FAILURE() << "not told as damage: " << e.what();
    }
  };
  const hid_t config_type = H5Tcopy(H5T_C_S1);
  H5Tset_size(config_type, 20);
  for (const auto& [object, name, type] : std::vector<std::tuple<const char*, const char*, hid_t>>{
           {"/", "format_version", H5T_STD_I64LE},
           {"/", "step", H5T_STD_I64LE},
           {"/", "config", config_type},
           {"/train", "learning_rate", H5T_IEEE_F64LE},
           {"/train", "epoch", H5T_STD_I64LE},
           {"/model/embed_tokens.weight", "crc32", H5T_STD_I64LE}}) {
    replace_attr(object, name, type, 64);
    expect_refused(fmt::format("attribute '{}' does not hold exactly one value: the file is corrupted", name));
    replace_attr(object, name, type, 0);  // ... where one value (of the wrong contents) gets past this check
    const std::string msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
    EXPECT_EQ(msg.find("does not hold exactly one value"), std::string::npos) << msg;
  }
  H5Tclose(config_type);
  const hid_t variable = H5Tcopy(H5T_C_S1);
  H5Tset_size(variable, H5T_VARIABLE);
  replace_attr("/", "config", variable, 0);
  H5Tclose(variable);
  const std::string msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
  EXPECT_NE(msg.find("attribute 'config' is not a string of fixed length"), std::string::npos) << msg;
}

// A dataset is refused, before memory is taken for it, where the file does not hold its data: no
// element (a null dataspace), chunks never written (they would read as fill values: a 7 KB file
// claiming gigabytes, found by fuzzing). One compressed in chunks, as h5repack writes, loads.
TEST_F(CheckpointTest, DatasetsWhoseDataTheFileDoesNotHoldAreRefused) {
  const char* name = "/model/embed_tokens.weight";
  const auto replace = [&](hid_t space, hid_t dcpl, const std::vector<float>* values) {
    io::save_checkpoint(path("c.h5"), sample_checkpoint());
    const hid_t f = H5Fopen(path("c.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t old = H5Dopen2(f, name, H5P_DEFAULT);
    std::int64_t crc = 0;
    const hid_t old_crc = H5Aopen(old, "crc32", H5P_DEFAULT);
    ASSERT_GE(H5Aread(old_crc, H5T_NATIVE_INT64, &crc), 0);
    H5Aclose(old_crc);
    H5Dclose(old);
    ASSERT_GE(H5Ldelete(f, name, H5P_DEFAULT), 0);
    const hid_t ds = H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    if (values != nullptr) {
      ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values->data()), 0);
    }
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(ds, "crc32", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &crc), 0);
    H5Aclose(a);
    H5Sclose(scalar);
    H5Dclose(ds);
    H5Fclose(f);
  };
  const auto refused = [&](const std::string& what) {
    const std::string msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
    EXPECT_NE(msg.find(fmt::format("checkpoint '{}': dataset '{}' {}", path("c.h5"), name, what)), std::string::npos)
        << msg;
  };
  const hid_t null_space = H5Screate(H5S_NULL);
  replace(null_space, H5P_DEFAULT, nullptr);
  H5Sclose(null_space);
  refused("holds no value (a null dataspace): the file is corrupted");

  const std::vector<hsize_t> huge = {16, 4294967328ULL}, chunk = {1, 1024};
  const hid_t huge_space = H5Screate_simple(2, huge.data(), nullptr);
  const hid_t chunked = H5Pcreate(H5P_DATASET_CREATE);
  ASSERT_GE(H5Pset_chunk(chunked, 2, chunk.data()), 0);
  replace(huge_space, chunked, nullptr);
  H5Sclose(huge_space);
  H5Pclose(chunked);
  refused("is stored in chunks, not all of them written: the file is corrupted");

  const Tensor weights = sample_checkpoint().model.at("embed_tokens.weight");
  const std::vector<float> values(weights.data<float>(), weights.data<float>() + weights.numel());
  const std::vector<hsize_t> dims = {5, 2}, small_chunk = {2, 2};
  const hid_t space = H5Screate_simple(2, dims.data(), nullptr);
  const hid_t deflated = H5Pcreate(H5P_DATASET_CREATE);
  ASSERT_GE(H5Pset_chunk(deflated, 2, small_chunk.data()), 0);
  ASSERT_GE(H5Pset_deflate(deflated, 6), 0);
  replace(space, deflated, &values);
  H5Sclose(space);
  H5Pclose(deflated);
  expect_same(io::load_checkpoint(path("c.h5")).model, sample_checkpoint().model);
}

// A checkpoint holding a NaN or an infinity (with a checksum that matches) is refused, naming the
// dataset and the element: the weights would translate into empty lines without a word.
TEST_F(CheckpointTest, NonFiniteValuesAreRefused) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    io::Checkpoint c = sample_checkpoint();
    c.model.at("encoder.layers.0.fc1.weight").data<float>()[7] = bad;
    io::save_checkpoint(path("c.h5"), c);
    const std::string msg = error_of([&] { io::load_checkpoint(path("c.h5"), true); });
    EXPECT_NE(msg.find(fmt::format("checkpoint '{}': dataset '/model/encoder.layers.0.fc1.weight' holds a non-finite "
                                   "value ({}) at element 7",
                                   path("c.h5"), bad)),
              std::string::npos)
        << msg;
  }
  io::Checkpoint c = sample_checkpoint();
  c.exp_avg_sq.at("embed_tokens.weight").data<float>()[0] = std::numeric_limits<float>::infinity();
  io::save_checkpoint(path("c.h5"), c);
  EXPECT_NE(error_of([&] {
              io::load_checkpoint(path("c.h5"));
            }).find("dataset '/optimizer/exp_avg_sq/embed_tokens.weight' holds a non-finite value (inf) at element 0"),
            std::string::npos);
}

TEST_F(CheckpointTest, ParametersMustFitTheModel) {
  io::save_checkpoint(path("c.h5"), sample_checkpoint());
  const io::Checkpoint c = io::load_checkpoint(path("c.h5"));
  const ag::Var fc1 = ag::Var::parameter(Tensor::zeros({3, 4}), "encoder.layers.0.fc1.weight");
  const ag::Var emb = ag::Var::parameter(Tensor::zeros({5, 2}), "embed_tokens.weight");
  std::vector<ag::Var> params = {fc1, emb};
  io::assign_weights(c, path("c.h5"), params);
  expect_same(c.model, io::named_values(params));

  std::vector<ag::Var> wrong_shape = {fc1, ag::Var::parameter(Tensor::zeros({6, 2}), "embed_tokens.weight")};
  EXPECT_EQ(error_of([&] { io::assign_weights(c, path("c.h5"), wrong_shape); }),
            fmt::format("checkpoint '{}': '/model/embed_tokens.weight' has shape [5, 2], the configured model needs "
                        "[6, 2]",
                        path("c.h5")));
  std::vector<ag::Var> missing = {fc1, emb, ag::Var::parameter(Tensor::zeros({2}), "decoder.layer_norm.bias")};
  EXPECT_EQ(error_of([&] { io::match_parameters(c.exp_avg, missing, path("c.h5"), "/optimizer/exp_avg"); }),
            fmt::format("checkpoint '{}' has no '/optimizer/exp_avg/decoder.layer_norm.bias': it does not fit the "
                        "configured model",
                        path("c.h5")));
  std::vector<ag::Var> fewer = {emb};
  EXPECT_EQ(error_of([&] { io::assign_weights(c, path("c.h5"), fewer); }),
            fmt::format("checkpoint '{}' has '/model/encoder.layers.0.fc1.weight', which the configured model does "
                        "not have",
                        path("c.h5")));
}

TEST_F(CheckpointTest, UnwritableFolderIsNamedAndNothingIsLeft) {
  std::ofstream(path("plain_file")) << "x";
  const std::string target = path("plain_file") + "/sub/c.h5";
  const std::string msg = error_of([&] { io::save_checkpoint(target, sample_checkpoint()); });
  EXPECT_NE(msg.find(fmt::format("cannot write checkpoint '{}': cannot create folder", target)), std::string::npos)
      << msg;
}

// The final name is taken by a non-empty folder, so the rename fails: the message gives the rename's
// own error (it once said "Success", the result of cleaning up) and the temporary file is gone.
TEST_F(CheckpointTest, FailedRenameNamesItsErrorAndLeavesNoTemporary) {
  fs::create_directories(path("c.h5/inside"));
  const std::string msg = error_of([&] { io::save_checkpoint(path("c.h5"), sample_checkpoint()); });
  EXPECT_NE(msg.find(fmt::format("cannot write checkpoint '{}': renaming '{}.tmp' to it failed: ", path("c.h5"),
                                 path("c.h5"))),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("Success"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::make_error_code(std::errc::is_a_directory).message()), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("c.h5.tmp")));
}

// A full disk, simulated with a file-size limit: the save fails with a clear message, the
// temporary file is gone and the previous checkpoint under the same name is intact.
TEST_F(CheckpointTest, FullDiskKeepsThePreviousCheckpoint) {
  io::Checkpoint old = sample_checkpoint();
  io::save_checkpoint(path("c.h5"), old);
  io::Checkpoint big = sample_checkpoint();
  big.model["embed_tokens.weight"] = filled({1024, 256}, 3.0f);  // 1 MiB: over the limit below

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
  rlimit small = saved;
  small.rlim_cur = 256 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string msg = error_of([&] { io::save_checkpoint(path("c.h5"), big); });
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(msg.find(fmt::format("cannot write checkpoint '{}.tmp'", path("c.h5"))), std::string::npos) << msg;
  EXPECT_NE(msg.find("disk full"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("c.h5.tmp")));
  expect_same(old.model, io::load_checkpoint(path("c.h5")).model);
}

void set_format_version_99(const std::string& file) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
  const std::int64_t v = 99;
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Fclose(f);
}

TEST_F(CheckpointTest, OtherFormatVersionsAreRefused) {
  io::save_checkpoint(path("c.h5"), sample_checkpoint());
  set_format_version_99(path("c.h5"));
  EXPECT_EQ(error_of([&] { io::load_checkpoint(path("c.h5")); }),
            fmt::format("checkpoint '{}': format version 99 is not the one this build reads ({})", path("c.h5"),
                        io::kCheckpointFormatVersion));
}

// The training state's attributes and the file's step carry a checksum as the datasets do: an
// edited Adam t or step is refused, naming /train; a file written before the checksum still loads.
TEST_F(CheckpointTest, ChangedTrainingStateFailsItsChecksum) {
  const auto set_attr = [&](const char* group, const char* name, std::int64_t v) {
    const hid_t f = H5Fopen(path("c.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    const hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
  };
  for (const auto& [group, name] : {std::pair{"train", "optimizer_step"}, {"train", "position"}}) {
    io::save_checkpoint(path("c.h5"), sample_checkpoint());
    set_attr(group, name, 11);
    const std::string msg = error_of([&] { io::load_checkpoint(path("c.h5")); });
    EXPECT_NE(msg.find(fmt::format("checkpoint '{}': the attributes of '/train' and the file's step fail their "
                                   "checksum (stored crc32",
                                   path("c.h5"))),
              std::string::npos)
        << name << ": " << msg;
  }
  io::save_checkpoint(path("c.h5"), sample_checkpoint());
  {
    const hid_t f = H5Fopen(path("c.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t g = H5Gopen2(f, "train", H5P_DEFAULT);
    ASSERT_GE(H5Adelete(g, "crc32"), 0);
    H5Gclose(g);
    H5Fclose(f);
  }
  EXPECT_EQ(io::load_checkpoint(path("c.h5")).state->optimizer_step, sample_checkpoint().state->optimizer_step);
}

// The root's step and config carry a checksum too, in every kind of file: an edited `layers: 2`
// (the model's shape) or step is refused naming the root attributes, in weights-only files as
// well; a file written before that checksum still loads.
TEST_F(CheckpointTest, ChangedConfigOrStepFailsTheHeaderChecksum) {
  const auto edit_root = [&](const std::string& file, const std::function<void(hid_t)>& edit) {
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    edit(f);
    H5Fclose(f);
  };
  const auto set_config = [](hid_t f) {  // same length, so the fixed-size string type still fits
    const hid_t a = H5Aopen(f, "config", H5P_DEFAULT);
    const hid_t type = H5Aget_type(a);
    std::string text(H5Tget_size(type), '\0');
    ASSERT_GE(H5Aread(a, type, text.data()), 0);
    ASSERT_NE(text.find("layers: 2"), std::string::npos);
    text.replace(text.find("layers: 2"), 9, "layers: 6");
    ASSERT_GE(H5Awrite(a, type, text.data()), 0);
    H5Tclose(type);
    H5Aclose(a);
  };
  const auto set_step = [](hid_t f) {
    const hid_t a = H5Aopen(f, "step", H5P_DEFAULT);
    const std::int64_t v = 7;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
  };
  io::Checkpoint weights = sample_checkpoint();
  weights.exp_avg.clear();
  weights.exp_avg_sq.clear();
  weights.state.reset();
  for (const io::Checkpoint& c : {sample_checkpoint(), weights}) {
    for (const auto& edit : {std::function<void(hid_t)>(set_config), std::function<void(hid_t)>(set_step)}) {
      io::save_checkpoint(path("c.h5"), c);
      edit_root(path("c.h5"), edit);
      const std::string expected = fmt::format(
          "checkpoint '{}': the root attributes 'step' and 'config' fail their checksum (stored crc32 ", path("c.h5"));
      for (const auto& load : std::vector<std::function<void()>>{[&] { io::load_checkpoint(path("c.h5")); },
                                                                 [&] { io::read_checkpoint_header(path("c.h5")); },
                                                                 [&] { io::load_vocabularies(path("c.h5")); }}) {
        const std::string msg = error_of(load);
        EXPECT_NE(msg.find(expected), std::string::npos) << msg;
        EXPECT_NE(msg.find("the file is corrupted or was edited"), std::string::npos) << msg;
      }
    }
  }
  io::save_checkpoint(path("c.h5"), weights);
  edit_root(path("c.h5"), [](hid_t f) { ASSERT_GE(H5Adelete(f, "crc32"), 0); });
  EXPECT_EQ(io::read_checkpoint_header(path("c.h5")).config_yaml, weights.config_yaml);
  EXPECT_EQ(io::load_checkpoint(path("c.h5")).step, 42);
}

// Damaged bytes are told from other refusals by type (a resume names an earlier checkpoint for
// them only): not HDF5, a failing checksum; but not a missing file or another format version.
TEST_F(CheckpointTest, DamageIsItsOwnErrorType) {
  const auto damaged = [](const std::function<void()>& load) {
    try {
      load();
    } catch (const io::DamagedCheckpoint&) {
      return true;
    } catch (const Error&) {
      return false;
    }
    ADD_FAILURE() << "no error";
    return false;
  };
  std::ofstream(path("text.h5")) << "not a checkpoint\n";
  EXPECT_TRUE(damaged([&] { io::load_checkpoint(path("text.h5")); }));
  io::save_checkpoint(path("c.h5"), sample_checkpoint());
  {
    const hid_t f = H5Fopen(path("c.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t ds = H5Dopen2(f, "/model/embed_tokens.weight", H5P_DEFAULT);
    const std::vector<float> other(10, 3.0f);
    ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, other.data()), 0);
    H5Dclose(ds);
    H5Fclose(f);
  }
  EXPECT_TRUE(damaged([&] { io::load_checkpoint(path("c.h5")); }));
  EXPECT_FALSE(damaged([&] { io::load_checkpoint(path("missing.h5")); }));
  io::save_checkpoint(path("v.h5"), sample_checkpoint());
  set_format_version_99(path("v.h5"));
  EXPECT_FALSE(damaged([&] { io::load_checkpoint(path("v.h5")); }));
}

// Saving Adam's state and restoring it into a fresh optimizer continues bit-exactly.
TEST_F(CheckpointTest, AdamStateResumesBitExactly) {
  auto make = [] { return ag::Var::parameter(filled({4, 3}, 0.5f), "w"); };
  auto grad_step = [](optim::Adam& adam, ag::Var& w, int k) {
    w.set_grad(filled({4, 3}, 0.1f * static_cast<float>(k)));
    adam.step(1e-2);
  };
  ag::Var straight = make();
  optim::Adam a({straight}, {});
  for (int k = 1; k <= 6; ++k) grad_step(a, straight, k);

  ag::Var first = make();
  optim::Adam b({first}, {});
  for (int k = 1; k <= 3; ++k) grad_step(b, first, k);
  io::Checkpoint c;
  c.model = io::named_values(b.params());
  c.exp_avg = {{"w", b.first_moments()[0]}};
  c.exp_avg_sq = {{"w", b.second_moments()[0]}};
  c.state = io::TrainingState{.step = 3, .optimizer_step = b.steps()};
  io::save_checkpoint(path("adam.h5"), c);

  const io::Checkpoint r = io::load_checkpoint(path("adam.h5"));
  ag::Var resumed = ag::Var::parameter(Tensor::zeros({4, 3}), "w");
  std::vector<ag::Var> params = {resumed};
  io::assign_weights(r, path("adam.h5"), params);
  optim::Adam d(params, {});
  d.set_state(static_cast<long>(r.state->optimizer_step), io::match_parameters(r.exp_avg, params, "adam.h5", "m"),
              io::match_parameters(r.exp_avg_sq, params, "adam.h5", "v"));
  for (int k = 4; k <= 6; ++k) grad_step(d, resumed, k);
  expect_same(io::named_values({straight}), io::named_values({resumed}));
  EXPECT_EQ(error_of([&] {
              d.set_state(1, {Tensor::zeros({2})}, {Tensor::zeros({4, 3})});
            }),
            "Adam::set_state: moment of 'w' is float32[2] cpu, the parameter float32[4, 3] cpu");
  EXPECT_EQ(error_of([&] {
              d.set_state(1, {Tensor::zeros({4, 3}, DType::f64)}, {Tensor::zeros({4, 3})});
            }),
            "Adam::set_state: moment of 'w' is float64[4, 3] cpu, the parameter float32[4, 3] cpu");
}

}  // namespace
}  // namespace tessera
