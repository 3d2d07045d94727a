#!/bin/sh
# parallel.zero 1 (ZeRO-1: Adam's moments sharded over the data-parallel ranks) under mpirun:
#  - at dp=2, dp=4 and tp=2 x dp=2 it gives zero 0's losses at each of 20 steps (float32, 1e-5; the
#    norm 2e-4) and final weights (1e-5, but the key projections' biases: see same_weights), and
#    each rank logs 1/dp of zero 0's optimizer bytes;
#  - so it does with train.accumulate 2, and with parallel.overlap false;
#  - its checkpoints hold the whole moments, zero 0's (1e-6), in the same layout;
#  - they resume bit-exactly in the same layout, and a zero 1 <-> 0, dp 2 -> 4 and tp 2 -> 1 resume
#    continues with the uninterrupted run's losses;
#  - a NaN gradient on one rank stops every rank before the update, with one message.
# Usage: zero_optimizer.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common="--config $config --set model.dropout=0 --set train.log_every=1 --set train.valid_every=0 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=50 --set checkpoint.keep_best=false --set train.max_steps=20 --set checkpoint.every=10 --set parallel.bucket_mb=0.05"
. "$(dirname "$0")/same_losses.sh"
train() {  # train NAME TP DP ZERO [ARGS...]: a run into $work/NAME
  name=$1 tp=$2 dp=$3 zero=$4 && shift 4
  mpirun -np $((tp * dp)) --oversubscribe "$tessera" train $common --set parallel.tensor=$tp --set parallel.data=$dp \
    --set parallel.zero=$zero --set output.dir="$work/$name" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name"; }
}
state_bytes() { sed -n 's/^{"optimizer_state_bytes": \([0-9]*\), .*/\1/p' "$1"; }

for layout in "1 2" "1 4" "2 2"; do
  set -- $layout
  tp=$1 dp=$2
  train "tp${tp}_dp${dp}_z0" $tp $dp 0
  train "tp${tp}_dp${dp}_z1" $tp $dp 1
  a="$work/tp${tp}_dp${dp}_z0" b="$work/tp${tp}_dp${dp}_z1"
  [ "$(losses "$b/metrics.jsonl" | wc -l)" -eq 20 ] || fail "tp=$tp dp=$dp zero 1: not 20 steps logged"
  same_losses "$a/metrics.jsonl" "$b/metrics.jsonl" 1
  same_weights "$a/model.h5" "$b/model.h5" 1e-5 /model || fail "tp=$tp dp=$dp: final weights differ"
  same_weights "$a/checkpoint_00000010.h5" "$b/checkpoint_00000010.h5" 1e-6 /optimizer ||
    fail "tp=$tp dp=$dp: the checkpoints' Adam moments differ"
  # 1/dp: at most a padding element per bucket and moment over the exact share.
  z0=$(state_bytes "$a/metrics.jsonl") z1=$(state_bytes "$b/metrics.jsonl")
  echo "tp=$tp dp=$dp: optimizer bytes per rank $z0 (zero 0), $z1 (zero 1)"
  [ -n "$z0" ] && [ -n "$z1" ] && [ $((z1 * dp)) -ge "$z0" ] && [ $((z1 * dp - z0)) -le $((dp * 8 * 64)) ] ||
    fail "tp=$tp dp=$dp: zero 1 logs $z1 optimizer bytes per rank, not 1/$dp of zero 0's $z0"
  grep -q "^optimizer: Adam, .* per rank (parallel.zero 1: sharded over $dp data-parallel ranks)" "$b.log" ||
    fail "tp=$tp dp=$dp: no optimizer line"
done
h5ls -r "$work/tp2_dp2_z1/checkpoint_00000010.h5" | grep -q '^/optimizer/exp_avg/encoder\.layers\.0\.fc1\.weight  *Dataset {256, 64}$' ||
  fail "the zero 1 checkpoint does not hold the whole fc1 moment"

# Gradients accumulated over two batches, and buckets reduce-scattered after backward
# (parallel.overlap false): zero 0's updates still.
train acc_z0 1 2 0 --set train.accumulate=2
train acc_z1 1 2 1 --set train.accumulate=2
same_losses "$work/acc_z0/metrics.jsonl" "$work/acc_z1/metrics.jsonl" 1
train serial_z1 1 2 1 --set parallel.overlap=false
same_losses "$work/tp1_dp2_z0/metrics.jsonl" "$work/serial_z1/metrics.jsonl" 1

# Resumes from step 10 to 20, against the run that never stopped.
resume() {  # resume NAME FROM TP DP ZERO REFERENCE
  train "resume_$1" $3 $4 $5 --resume "$work/$2/checkpoint_00000010.h5"
  grep -q "resumed from .* at step 10 " "$work/resume_$1.log" || fail "resume $1 did not start at step 10"
  same_losses "$work/$6/metrics.jsonl" "$work/resume_$1/metrics.jsonl" 11
}
resume same tp1_dp2_z1 1 2 1 tp1_dp2_z1
losses "$work/tp1_dp2_z1/metrics.jsonl" | awk '$1 > 10' > "$work/a.txt"
losses "$work/resume_same/metrics.jsonl" | awk '$1 > 10' > "$work/b.txt"
[ "$(wc -l < "$work/a.txt")" -eq 10 ] && cmp "$work/a.txt" "$work/b.txt" || fail "same-layout zero 1 resume is not bit-exact"
resume z1_to_z0 tp1_dp2_z1 1 2 0 tp1_dp2_z0
resume z0_to_z1 tp1_dp2_z0 1 2 1 tp1_dp2_z1
resume dp2_to_dp4 tp1_dp2_z1 1 4 1 tp1_dp2_z1
resume tp2_to_tp1 tp2_dp2_z1 1 2 1 tp2_dp2_z1

# A NaN gradient on rank 1 of two: every rank stops before the update, one message.
status=0
TESSERA_FAULT_NAN=1:5 mpirun -np 2 --oversubscribe "$tessera" train $common --set parallel.data=2 --set parallel.zero=1 \
  --set output.dir="$work/nan" > "$work/nan.log" 2>&1 || status=$?
[ $status -ne 0 ] || fail "a NaN gradient did not stop the zero 1 run"
[ "$(grep -c 'error: step 5: the gradient norm is NaN' "$work/nan.log")" -eq 1 ] ||
  { cat "$work/nan.log"; fail "no single error naming step 5's NaN gradient norm"; }
[ ! -e "$work/nan/model.h5" ] || fail "a model was written after the NaN"

echo PASS
