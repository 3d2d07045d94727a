// The training pairs of a translation run: the corpus file (data.cache), mapped by every rank, or
// encoded into it first, each rank a share of the text; in memory without one.
#pragma once

#include "data/examples.h"
#include "data/task_data.h"
#include "dist/communicator.h"
#include "io/run_config.h"

namespace tessera::data {

// The training pairs of `t`'s text and vocabularies (every rank of `world` calls it). With
// data.cache: read in place from <data.cache_dir or output.dir>/encoded_train_<key>.bin, which the
// ranks encode when it is missing or not to be trusted (each its share of the lines into a part,
// rank 0 joining them); in memory, as each rank encodes and exchanges them, with data.cache: false
// or when no file every rank reads can be had (a folder the ranks do not share, one not writable).
data::ExampleSet encode_training_pairs(const io::RunConfig& cfg, const TaskData& t, dist::Communicator* world);

}  // namespace tessera::data
