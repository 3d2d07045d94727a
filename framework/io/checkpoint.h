// Checkpoints in HDF5: one file holds everything a run needs to continue exactly where it stopped.
//
//   /                                   attrs: format_version, step, config (effective YAML), created_by, crc32
//   /model/<dotted.parameter.name>      float32, the full logical tensor          attr: crc32
//   /optimizer/exp_avg/<name>           Adam first moment  (full checkpoints)    attr: crc32
//   /optimizer/exp_avg_sq/<name>        Adam second moment (full checkpoints)    attr: crc32
//   /train                              attrs: the TrainingState fields, crc32 (full checkpoints)
//   /vocab/<joint|src|tgt>              uint8, the run's SentencePiece model(s)    attr: crc32
//
// Weights-only files (the final model.h5, `tessera average` output) hold /, /model and /vocab.
// /vocab is absent for synthetic tasks and in files written before checkpoints held it.
// Writes go to "<path>.tmp" in the same folder, are flushed to disk, then renamed: a crash at any
// instant leaves earlier files untouched and never a partial file under the final name. Loading
// verifies every dataset's CRC-32 (zlib's, over its little-endian float32 bytes; computed with ISA-L).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autograd/var.h"
#include "common/progress.h"
#include "dist/mpi_communicator.h"
#include "dist/sharding.h"

namespace tessera::io {

inline constexpr std::int64_t kCheckpointFormatVersion = 2;

using TensorMap = std::map<std::string, Tensor>;  // by dotted parameter name

// Thrown where a checkpoint's bytes are damaged (not HDF5, truncated, a checksum that fails, a shape
// beyond the file): an earlier checkpoint of the run may still be good. Other refusals (a missing
// file, another format version, a model that does not fit) are plain Errors.
class DamagedCheckpoint : public Error {
 public:
  using Error::Error;
};

// Beside the weights and moments: what makes a resumed run continue as if it had never stopped.
struct TrainingState {
  std::int64_t step = 0;            // updates done
  std::int64_t epoch = 0;           // data loader: completed epochs
  std::int64_t position = 0;        // data loader: batches already taken from the current epoch
  std::uint64_t shuffle_seed = 0;   // data loader: seed of the epoch shuffles
  std::uint64_t dropout_seed = 0;   // Philox key; the counter is derived from the step
  std::int64_t optimizer_step = 0;  // Adam's t (bias correction)
  double learning_rate = 0;         // of the last update (the schedule itself is a function of step)
  double elapsed_seconds = 0;       // training wall time so far (train.max_minutes counts all of it)
  double best_valid = std::numeric_limits<double>::quiet_NaN();  // best validation score so far
  std::int64_t best_valid_step = -1;
  std::int64_t validations_since_best = 0;  // train.patience counts these (0 in files written before it)
  // The step of the last validation that ran (-1: none): below `step` on the valid_every schedule
  // when a stop signal interrupted that step's validation, which a resume then runs first. Files
  // written before it: `step` (nothing pending).
  std::int64_t last_validated_step = -1;
  // Of the training text (see data::ParallelReader::fingerprint); 0 for synthetic tasks and in
  // files written before it.
  std::uint64_t train_fingerprint = 0;
  // The train.max_steps that train.fit_steps_to_time fitted (0: none, and in files before it).
  std::int64_t fitted_max_steps = 0;
};

struct Checkpoint {
  std::int64_t step = 0;
  std::string config_yaml;
  TensorMap model;
  TensorMap exp_avg, exp_avg_sq;       // empty in weights-only files
  std::optional<TrainingState> state;  // absent in weights-only files
  // The run's vocabularies as .model bytes (data::Vocab::serialized): "joint", or "src" and "tgt";
  // none for synthetic tasks. With them a checkpoint translates alone, and a resume can tell
  // that the vocabulary files are still the ones it was trained with.
  std::map<std::string, std::string> vocabularies;
};

// Writes atomically (see above). Throws naming the file on any failure (unwritable folder,
// disk full, ...); the temporary file is removed and nothing under `path` changes.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// ---- tensor-parallel checkpoints: the same file, written and read in slices
// A rank's part of a checkpoint under tensor parallelism: its blocks of each tensor.
struct ShardedCheckpoint {
  std::int64_t step = 0;
  std::string config_yaml;
  TensorMap model, exp_avg, exp_avg_sq;          // this rank's blocks (whole tensors where replicated)
  std::map<std::string, dist::ShardDim> shards;  // how each name splits over the group (absent: replicated)
  std::optional<TrainingState> state;
  // The same on every rank; group rank 0 writes them. Not read by load_checkpoint_sharded
  // (load_vocabularies reads them).
  std::map<std::string, std::string> vocabularies;
};

// Every rank of `group` (one tensor-parallel group) writes only its own blocks, as hyperslabs of
// the full logical datasets, into one file (parallel HDF5 over MPI-IO); replicated tensors are
// written by group rank 0. CRC-32s of the full tensors are combined from the blocks'. Same file
// layout as save_checkpoint, same atomic rename (by group rank 0). Collective.
void save_checkpoint_sharded(const std::string& path, const ShardedCheckpoint& ckpt, dist::MpiCommunicator& group);

// Reads only this rank's blocks (`shards` gives each name's split over `group`; replicated names
// are read whole) and verifies every dataset's CRC-32 from all ranks' blocks. Collective.
ShardedCheckpoint load_checkpoint_sharded(const std::string& path, const std::map<std::string, dist::ShardDim>& shards,
                                          dist::MpiCommunicator& group, bool weights_only = false);

// Reads and verifies a checkpoint; with weights_only, the optimizer moments are not read.
// Throws naming the file and what is wrong (missing, not HDF5, truncated, checksum, ...).
Checkpoint load_checkpoint(const std::string& path, bool weights_only = false);
// What a checkpoint's header says, without reading its tensors.
struct CheckpointHeader {
  std::int64_t step = 0;
  std::string config_yaml;
  bool full = false;  // holds the optimizer moments and the training state (not weights only)
};
// Throws naming the file like load_checkpoint.
CheckpointHeader read_checkpoint_header(const std::string& path);
// The step a checkpoint was written at (its header only).
std::int64_t checkpoint_step(const std::string& path);
// The vocabularies a checkpoint holds (see Checkpoint::vocabularies), without reading its tensors.
std::map<std::string, std::string> load_vocabularies(const std::string& path);

// The element-wise mean of the checkpoints' weights (accumulated in float64), as a weights-only
// checkpoint with the first file's config and vocabularies and the largest step. All must
// hold the same names and shapes, and the same vocabularies where they hold any; throws naming
// the file that differs.
Checkpoint average_checkpoints(const std::vector<std::string>& paths, Progress* progress = nullptr);

// The CRC-32 stored with each dataset: zlib's crc32() (and Python's zlib.crc32) of the bytes.
std::uint32_t checksum(const void* data, std::size_t bytes);

// The parameters' current values by name (shares storage, no copy).
TensorMap named_values(const std::vector<ag::Var>& params);

// For each parameter, the tensor of the same name in `tensors` (converted to the parameter's
// dtype), in parameter order. Throws naming the file, the group and the parameter when one is
// missing, has another shape, or when `tensors` holds names the model does not have.
std::vector<Tensor> match_parameters(const TensorMap& tensors, const std::vector<ag::Var>& params,
                                     const std::string& path, const std::string& group);

// Copies the checkpoint's /model tensors into `params` (checked as match_parameters does).
void assign_weights(const Checkpoint& ckpt, const std::string& path, std::vector<ag::Var>& params);

}  // namespace tessera::io
