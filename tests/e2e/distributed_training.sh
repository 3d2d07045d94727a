#!/bin/sh
# `tessera train` under mpirun on 4 processes (oversubscribed on small machines):
#  - tp=2, dp=2 and tp=2 x dp=2 give the single process's losses at each of 20 steps (float32, 1e-5; the norm 2e-4);
#  - a checkpoint written at tp=2 x dp=2 resumes at tp=1 x dp=1 and at tp=2 x dp=1 (and one from
#    tp=1 at tp=2 x dp=2), continuing with the same losses; at tp=2 x dp=2 bit-exactly, and at
#    tp=1 x dp=2 with dropout on; all-reduces after backward (parallel.overlap false) change nothing;
#  - a corrupted byte in one rank's slice is caught on resume;
#  - tensor x data that is not the process count stops every rank, the error printed once;
#  - so does a NaN gradient on one rank of two (data-parallel);
#  - a parallel corpus, encoded in shares by the ranks, gives the single process's losses at dp=2,
#    and a missing corpus file or one of another line count stops the job with one message; the
#    ranks waiting for rank 0 to train a vocabulary do not time out; at tp=2 the checkpoint stores
#    the vocabulary as one process does and resumes; a vocabulary or validation text that differs
#    between the ranks stops the job with one message;
#  - a SIGTERM on one rank stops every rank at the same step, with one checkpoint; a SIGINT on rank 1
#    is named by rank 0 and gives the job's exit status 130;
#  - a tensor-parallel save failing on one rank ends the job with its error, no temporary left;
#  - a rank that hangs in a tensor-parallel save ends the job through the collective timeout;
#  - ranks resuming from different files under one name (data or tensor parallel), or with --resume
#    alone from run folders that differ, are refused; a tp=2 checkpoint of 3 layers resumes alone;
#  - killing one rank of four ends the whole job within 60 s with a non-zero status.
# Usage: distributed_training.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/wait_for_marker.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { np=$1 && shift; mpirun -np "$np" --oversubscribe "$@"; }
common="--config $config --set model.dropout=0 --set train.log_every=1 --set train.valid_every=0 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=50 --set checkpoint.keep_best=false"
. "$(dirname "$0")/same_losses.sh"

"$tessera" train $common --set train.max_steps=20 --set checkpoint.every=10 --set output.dir="$work/single" > "$work/single.log"
for layout in "2 1" "1 2" "2 2"; do
  set -- $layout
  tp=$1 dp=$2
  dir="$work/tp${tp}_dp${dp}"
  mpi $((tp * dp)) "$tessera" train $common --set train.max_steps=20 --set checkpoint.every=10 \
    --set parallel.tensor=$tp --set parallel.data=$dp --set output.dir="$dir" > "$dir.log" 2>&1 || { cat "$dir.log"; fail "tp=$tp dp=$dp"; }
  [ "$(losses "$dir/metrics.jsonl" | wc -l)" -eq 20 ] || fail "tp=$tp dp=$dp: not 20 steps logged"
  same_losses "$work/single/metrics.jsonl" "$dir/metrics.jsonl" 1
  # The model line counts the whole model whatever the layout (it showed tp's per-rank share).
  [ "$(grep '^model: ' "$dir.log")" = "$(grep '^model: ' "$work/single.log")" ] ||
    fail "tp=$tp dp=$dp: the model line differs from one process's: $(grep '^model: ' "$dir.log")"
done
# The checkpoint holds full tensors whatever the layout.
h5ls -r "$work/tp2_dp2/checkpoint_00000010.h5" | grep -q '^/model/encoder\.layers\.0\.fc1\.weight  *Dataset {256, 64}$' \
  || fail "tp=2 checkpoint does not hold the full fc1 weight"

# Cross-layout resume from step 10 to 20.
resume() {  # resume NAME FROM_CHECKPOINT TP DP
  dir="$work/resume_$1"
  mkdir -p "$dir"
  mpi $(($3 * $4)) "$tessera" train $common --set train.max_steps=20 --set checkpoint.every=10 \
    --set parallel.tensor=$3 --set parallel.data=$4 --set output.dir="$dir" --resume "$2" > "$dir.log" 2>&1 \
    || { cat "$dir.log"; fail "resume $1"; }
  grep -q "resumed from .* at step 10 " "$dir.log" || fail "resume $1 did not start at step 10"
  same_losses "$work/single/metrics.jsonl" "$dir/metrics.jsonl" 11
}
resume tp2dp2_to_tp2dp2 "$work/tp2_dp2/checkpoint_00000010.h5" 2 2
# Same layout: bit-exact (the logged losses are the shortest round-trip decimal of each double).
losses "$work/tp2_dp2/metrics.jsonl" | awk '$1 > 10' > "$work/a.txt"
losses "$work/resume_tp2dp2_to_tp2dp2/metrics.jsonl" | awk '$1 > 10' > "$work/b.txt"
[ "$(wc -l < "$work/a.txt")" -eq 10 ] && cmp "$work/a.txt" "$work/b.txt" || fail "same-layout resume is not bit-exact"
h5diff "$work/tp2_dp2/model.h5" "$work/resume_tp2dp2_to_tp2dp2/model.h5" /model /model > /dev/null \
  || fail "same-layout resume: final weights differ"
resume tp2dp2_to_single "$work/tp2_dp2/checkpoint_00000010.h5" 1 1
resume tp2dp2_to_tp2 "$work/tp2_dp2/checkpoint_00000010.h5" 2 1
resume single_to_tp2dp2 "$work/single/checkpoint_00000010.h5" 2 2
# All-reduces after backward (parallel.overlap false) give the same steps as overlapped ones.
mpi 2 "$tessera" train $common --set train.max_steps=20 --set parallel.data=2 --set parallel.overlap=false \
  --set output.dir="$work/serial" > "$work/serial.log" 2>&1 || { cat "$work/serial.log"; fail "parallel.overlap false"; }
same_losses "$work/single/metrics.jsonl" "$work/serial/metrics.jsonl" 1
# With dropout on (each replica's masks its own): a resume at tp=1 x dp=2 is bit-exact too.
dropout="--set model.dropout=0.1 --set train.max_steps=20 --set checkpoint.every=10 --set parallel.data=2"
mpi 2 "$tessera" train $common $dropout --set output.dir="$work/drop" > "$work/drop.log" 2>&1 ||
  { cat "$work/drop.log"; fail "dp=2 with dropout"; }
mpi 2 "$tessera" train $common $dropout --set output.dir="$work/drop_resumed" --resume "$work/drop/checkpoint_00000010.h5" \
  > "$work/drop_resumed.log" 2>&1 || { cat "$work/drop_resumed.log"; fail "dp=2 with dropout: resume"; }
losses "$work/drop/metrics.jsonl" | awk '$1 > 10' > "$work/a.txt"
losses "$work/drop_resumed/metrics.jsonl" | awk '$1 > 10' > "$work/b.txt"
[ "$(wc -l < "$work/a.txt")" -eq 10 ] && cmp "$work/a.txt" "$work/b.txt" || fail "dp=2 resume with dropout is not bit-exact"
losses "$work/tp1_dp2/metrics.jsonl" | cmp -s - "$work/a.txt" && fail "dropout 0.1 trained as dropout 0: the check above proves little"
h5diff "$work/drop/model.h5" "$work/drop_resumed/model.h5" /model /model > /dev/null || fail "dp=2 resume with dropout: final weights differ"

# Each rank reads only its slices, yet a corrupted byte in any block is caught (the blocks'
# checksums are combined across the group): rank 1's half of a column-split weight here.
cp "$work/tp2_dp2/checkpoint_00000010.h5" "$work/corrupt.h5"
offset=$(h5dump -p -H -d /model/encoder.layers.0.fc2.weight "$work/corrupt.h5" | sed -n 's/^ *OFFSET \([0-9]*\)$/\1/p')
printf '\377\377\377\377' | dd of="$work/corrupt.h5" bs=1 seek=$((offset + 4 * 200)) conv=notrunc 2> /dev/null
status=0
mpi 2 "$tessera" train $common --set train.max_steps=20 --set parallel.tensor=2 --set output.dir="$work/corrupt_run" \
  --resume "$work/corrupt.h5" > "$work/corrupt.log" 2>&1 || status=$?
[ $status -ne 0 ] || fail "a corrupted checkpoint resumed"
grep -q "dataset '/model/encoder.layers.0.fc2.weight' fails its checksum" "$work/corrupt.log" \
  || { cat "$work/corrupt.log"; fail "the corrupted dataset was not named"; }

# A layout that does not fit the process count: every rank stops, one message.
status=0
mpi 4 "$tessera" train $common --set parallel.tensor=3 --set output.dir="$work/bad" > "$work/bad.log" 2>&1 || status=$?
[ $status -ne 0 ] || fail "a bad layout did not fail"
[ "$(grep -c 'parallel.tensor (3) x parallel.data (1) = 3 processes, but this run has 4' "$work/bad.log")" -eq 1 ] \
  || { cat "$work/bad.log"; fail "the layout error was not printed exactly once"; }

# A model the tensor-parallel layout cannot split: every rank stops, one message.
status=0
mpi 2 "$tessera" train $common --set parallel.tensor=2 --set model.heads=1 --set output.dir="$work/heads" \
  > "$work/heads.log" 2>&1 || status=$?
[ $status -ne 0 ] || fail "heads that do not divide over the tensor-parallel ranks did not fail"
[ "$(grep -c 'heads 1 do not divide over 2 tensor-parallel ranks' "$work/heads.log")" -eq 1 ] \
  || { cat "$work/heads.log"; fail "the heads error was not printed exactly once"; }

# A NaN gradient on one rank (injected at step 3 on rank 1): the all-reduced norm is NaN on every
# rank, so all stop before the update; the error is printed once and the job exits non-zero.
status=0
TESSERA_FAULT_NAN=1:3 mpi 2 "$tessera" train $common --set train.max_steps=20 --set parallel.data=2 \
  --set output.dir="$work/nan" > "$work/nan.log" 2>&1 || status=$?
[ $status -ne 0 ] || fail "the job exited 0 after a NaN gradient"
[ "$(grep -c 'step 3: the gradient norm is NaN' "$work/nan.log")" -eq 1 ] \
  || { cat "$work/nan.log"; fail "the NaN gradient error was not printed exactly once"; }

# A parallel corpus: the ranks encode a share of the pairs each and exchange them, so dp=2 trains on
# the single process's batches (same losses); a missing file is reported once (by rank 0).
corpus="$(dirname "$0")/../data/corpus/multi30k_300"
text="--set data.task=translation --set data.train_src=$corpus.en --set data.train_tgt=$corpus.de \
  --set data.valid_src=$corpus.en --set data.valid_tgt=$corpus.de --set data.max_len=40 --set train.max_steps=6 \
  --set train.valid_max_sentences=6 --set decode.batch_sentences=2 --set decode.max_extra_len=5"
"$tessera" train $common $text --set data.vocab_size=300 --set output.dir="$work/text1" > "$work/text1.log" 2>&1 \
  || { cat "$work/text1.log"; fail "training on a corpus failed"; }
mpi 2 "$tessera" train $common $text --set data.vocab="$work/text1/vocab.model" --set parallel.data=2 \
  --set output.dir="$work/text2" > "$work/text2.log" 2>&1 || { cat "$work/text2.log"; fail "dp=2 on a corpus failed"; }
[ "$(grep 'training pairs kept' "$work/text1.log")" = "$(grep 'training pairs kept' "$work/text2.log")" ] \
  || { cat "$work/text2.log"; fail "dp=2 kept other corpus pairs than one process"; }
same_losses "$work/text1/metrics.jsonl" "$work/text2/metrics.jsonl" 1
# Under tensor parallelism the checkpoint's vocabulary (/vocab/joint) is written once into the
# shared file, the same as one process writes it, and every rank reads it back on resume.
mpi 2 "$tessera" train $common $text --set data.vocab="$work/text1/vocab.model" --set parallel.tensor=2 \
  --set output.dir="$work/text_tp2" > "$work/text_tp2.log" 2>&1 || { cat "$work/text_tp2.log"; fail "tp=2 on a corpus failed"; }
h5diff "$work/text1/checkpoint_00000006.h5" "$work/text_tp2/checkpoint_00000006.h5" /vocab/joint /vocab/joint \
  || fail "tp=2 stored another vocabulary than one process"
mpi 2 "$tessera" train $common $text --set data.vocab="$work/text1/vocab.model" --set parallel.tensor=2 \
  --set train.max_steps=7 --set output.dir="$work/text_tp2" --resume > "$work/text_tp2_resume.log" 2>&1 \
  || { cat "$work/text_tp2_resume.log"; fail "tp=2 resume on a corpus failed"; }
# ... and refused, once, with another vocabulary than the one stored.
"$tessera" vocab --input "$corpus.de" --model-prefix "$work/other" --vocab-size 300 > /dev/null
status=0
mpi 2 "$tessera" train $common $text --set data.vocab="$work/other.model" --set parallel.tensor=2 \
  --set train.max_steps=8 --set output.dir="$work/text_tp2" --resume > "$work/text_tp2_other.log" 2>&1 || status=$?
[ $status -ne 0 ] && [ "$(grep -c "vocabulary '$work/other.model' is not the one it was trained with" "$work/text_tp2_other.log")" -eq 1 ] \
  || { cat "$work/text_tp2_other.log"; fail "a tp=2 resume with another vocabulary was not refused exactly once"; }
# Files every rank reads for itself that differ between the ranks (node-local copies of the same
# path; here each rank runs in a folder of its own, where a relative path names its own file): the
# vocabulary, the validation text. One message, before any step.
refused_once() {  # refused_once NAME PATTERN: the job in $work/NAME.log failed, PATTERN once, no step
  [ $status -ne 0 ] && [ $status -ne 124 ] && [ "$(grep -c "$2" "$work/$1.log")" -eq 1 ] \
    && ! grep -q '^step ' "$work/$1.log" || { cat "$work/$1.log"; fail "$1: not refused once before training"; }
}
differ() {  # differ NAME PATTERN FILE RANK0_COPY RANK1_COPY ARGS...: FILE (relative) is each rank's copy
  name=$1 pattern=$2 file=$3 && mkdir -p "$work/$name/r0" "$work/$name/r1"
  cp "$4" "$work/$name/r0/$file" && cp "$5" "$work/$name/r1/$file" && shift 5
  status=0
  timeout 120 mpirun --oversubscribe -np 1 -wdir "$work/$name/r0" "$tessera" train $common $text --set parallel.data=2 \
    --set output.dir="$work/$name/out" "$@" : -np 1 -wdir "$work/$name/r1" "$tessera" train $common $text \
    --set parallel.data=2 --set output.dir="$work/$name/out" "$@" > "$work/$name.log" 2>&1 || status=$?
  refused_once "$name" "$pattern"
}
differ differ_vocab "the vocabulary 'vocab.model' differs between the ranks: 1 of 2 ranks" \
  vocab.model "$work/text1/vocab.model" "$work/other.model" --set data.vocab=vocab.model
sed "1s/^/ein /" "$corpus.de" > "$work/valid_other.de"
differ differ_valid "the validation text ('$corpus.en', 'valid.de') differs between the ranks" \
  valid.de "$corpus.de" "$work/valid_other.de" --set data.vocab="$work/text1/vocab.model" --set data.valid_tgt=valid.de
# ... and so do the configs themselves (an MPMD launch here; config files that differ between
# machines alike): another seed under tensor parallelism corrupted the heap in an all-reduce.
# Refused before the output folder is made.
status=0
timeout 120 mpirun --oversubscribe -np 1 "$tessera" train $common --set parallel.tensor=2 --set output.dir="$work/differ_config" \
  : -np 1 "$tessera" train $common --set parallel.tensor=2 --set output.dir="$work/differ_config" --set train.seed=7 \
  > "$work/differ_config.log" 2>&1 || status=$?
refused_once differ_config "the effective config (the config file with its --set overrides, and --resume) differs between the ranks: 1 of 2 ranks were given another one than rank 0"
[ ! -e "$work/differ_config" ] || fail "a refused start made its output folder"
status=0
timeout 120 mpirun --oversubscribe -np 1 "$tessera" train $common --set parallel.data=2 --set output.dir="$work/tp2_dp2" \
  --set train.max_steps=30 --resume : -np 1 "$tessera" train $common --set parallel.data=2 --set output.dir="$work/tp2_dp2" \
  --set train.max_steps=30 > "$work/differ_resume.log" 2>&1 || status=$?
refused_once differ_resume "the effective config (the config file with its --set overrides, and --resume) differs between the ranks"
# The replicas split the validation (loss batches, decoding batches). On the same weights (resumed
# at the last step: validation only) the loss is one process's bit for bit (per-batch sums added
# in batch order), and so is BLEU.
for np in 1 2; do
  mpi $np "$tessera" train $common $text --set data.vocab="$work/text1/vocab.model" --set parallel.data=$np \
    --set output.dir="$work/valid$np" --resume "$work/text1/checkpoint_00000006.h5" > "$work/valid$np.log" 2>&1 \
    || { cat "$work/valid$np.log"; fail "validation at dp=$np failed"; }
done
[ "$(grep -c '^valid 6 ' "$work/valid2.log")" -eq 1 ] || { cat "$work/valid2.log"; fail "no validation at dp=2"; }
[ "$(grep '^valid 6 ' "$work/valid1.log" | sed 's/ | [0-9.]*s$//')" = "$(grep '^valid 6 ' "$work/valid2.log" | sed 's/ | [0-9.]*s$//')" ] \
  || { grep '^valid' "$work/valid1.log" "$work/valid2.log"; fail "dp=2 validation differs from one process's"; }
v1=$(grep -o '"valid_loss": [^,]*' "$work/valid1/metrics.jsonl") v2=$(grep -o '"valid_loss": [^,]*' "$work/valid2/metrics.jsonl")
[ -n "$v1" ] && [ "$v1" = "$v2" ] || fail "validation loss at dp=2 ($v2) is not one process's ($v1) bit for bit"
status=0
mpi 2 "$tessera" train $common $text --set data.train_src="$work/missing.en" --set parallel.data=2 \
  --set output.dir="$work/missing" > "$work/missing.log" 2>&1 || status=$?
[ $status -ne 0 ] || fail "a missing corpus file did not fail"
[ "$(grep -c "cannot read '$work/missing.en'" "$work/missing.log")" -eq 1 ] \
  || { cat "$work/missing.log"; fail "the missing corpus file was not reported exactly once"; }
# The training text is streamed by every rank; rank 0 reads it through first, so that a line count
# that differs (found only at the end) is reported once too.
head -n 100 "$corpus.de" > "$work/short.de"
status=0
mpi 2 "$tessera" train $common $text --set data.vocab="$work/text1/vocab.model" --set data.train_tgt="$work/short.de" \
  --set parallel.data=2 --set output.dir="$work/short" > "$work/short.log" 2>&1 || status=$?
[ $status -ne 0 ] && [ "$(grep -c "$corpus.en has 300 lines but $work/short.de has 100" "$work/short.log")" -eq 1 ] \
  || { cat "$work/short.log"; fail "corpus files of different lengths were not reported exactly once"; }
status=0
mpi 2 "$tessera" train $common --set data.task=translation --set parallel.data=2 --set output.dir="$work/unset" \
  > "$work/unset.log" 2>&1 || status=$?
[ $status -ne 0 ] && [ "$(grep -c "data.task is 'translation' but data.train_src is not set" "$work/unset.log")" -eq 1 ] \
  || { cat "$work/unset.log"; fail "a translation task without files was not reported exactly once"; }

# Rank 0 reading the corpus and training a vocabulary (minutes on a large corpus) while the others
# wait is not a hang: with parallel.timeout_s = 5 the run goes through although rank 0 stays 10 s
# in that start (held after its read of the text by TESSERA_FAULT_TEXT_READ, then training the
# vocabulary), whatever the build's speed. The corpus is the small one: the encoding that follows
# is timed, and its shares take milliseconds. The timeout also bounds every other wait of the run
# (the ranks' skew at MPI's start, each step's all-reduce), so it is not cut closer than a loaded
# 2-core machine running other MPI tests beside this one can keep.
marker="$work/vocab_wait.marker"
mpi 2 env TESSERA_FAULT_TEXT_READ="$marker" "$tessera" train $common $text --set data.vocab_size=300 \
  --set parallel.data=2 --set parallel.timeout_s=5 --set output.dir="$work/vocab_wait" > "$work/vocab_wait.log" 2>&1 &
pid=$!
wait_for_marker "$marker" "$pid" "$work/vocab_wait.log"
sleep 10 && rm "$marker"
wait "$pid" || { cat "$work/vocab_wait.log"; fail "waiting for rank 0's vocabulary timed out"; }
grep -q "^data: trained a joint bpe vocabulary of 300 entries" "$work/vocab_wait.log" \
  || { cat "$work/vocab_wait.log"; fail "rank 0 trained no vocabulary while the other waited"; }

# SIGTERM reaching one rank just after the ranks agreed to go on (injected at step 3): every rank
# stops after step 4 together, one checkpoint, status 143 (acting alone, that rank checkpointed
# while the other trained on: a collective timeout and no checkpoint). Then rank 0's SIGTERM stops
# rank 1 too, and rank 1's own SIGTERM arriving meanwhile is its first, not a second that kills.
for faults in 1:3 0:3,1:4; do
  dir="$work/signal_$faults"
  status=0
  TESSERA_FAULT_SIGNAL=$faults mpi 2 "$tessera" train $common --set train.max_steps=1000000 --set parallel.data=2 \
    --set parallel.timeout_s=30 --set checkpoint.every=0 --set output.dir="$dir" > "$dir.log" 2>&1 || status=$?
  [ $status -eq 143 ] || { tail -n 20 "$dir.log"; fail "SIGTERM at $faults: exit status $status, expected 143"; }
  grep -q '^train: SIGTERM received: stopped after step 4;' "$dir.log" || fail "SIGTERM at $faults: did not stop after step 4"
  [ "$(ls "$dir" | grep -c '^checkpoint_[0-9]*\.h5$')" -eq 1 ] && [ -f "$dir/checkpoint_00000004.h5" ] ||
    fail "SIGTERM at $faults: expected only checkpoint_00000004.h5, found: $(ls "$dir")"
done

# The same SIGTERM just before a validation (rank 1, step 4 of valid_every=4): the ranks agree to
# cut the validation short (decoding a large validation set can take minutes, longer than a
# cluster's grace period) and stop after step 4.
dir="$work/signal_valid"
status=0
TESSERA_FAULT_SIGNAL=1:4 mpi 2 "$tessera" train $common --set train.max_steps=1000000 --set parallel.data=2 \
  --set train.valid_every=4 --set data.synthetic_valid_size=2000 --set checkpoint.every=0 --set output.dir="$dir" \
  > "$dir.log" 2>&1 || status=$?
[ $status -eq 143 ] || { tail -n 20 "$dir.log"; fail "SIGTERM before a validation: exit status $status, expected 143"; }
grep -q '^valid 4: interrupted by a stop signal' "$dir.log" || fail "the validation at step 4 was not interrupted"
grep -q '^train: SIGTERM received: stopped after step 4;' "$dir.log" || fail "SIGTERM before a validation: not stopped after step 4"
[ -f "$dir/checkpoint_00000004.h5" ] || fail "SIGTERM before a validation: no checkpoint_00000004.h5"

# SIGINT (a Ctrl-C) on rank 1 alone: rank 0 stops at the same step for it, and its message and
# exit status name SIGINT, not SIGTERM; the job exits 130.
dir="$work/sigint_peer"
mpi 2 "$tessera" train $common --set train.max_steps=1000000 --set parallel.data=2 --set checkpoint.every=0 \
  --set output.dir="$dir" > "$dir.log" 2>&1 &
job=$!
i=0
until grep -q '^step 3 ' "$dir.log"; do
  i=$((i + 1))
  [ $i -lt 1200 ] || { kill -9 $job; fail "SIGINT on rank 1: no step 3 after 120 s"; }
  sleep 0.1
done
for p in $(pgrep -x tessera); do  # rank 1 of this job, by its environment and command line
  tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' &&
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "output.dir=$dir " && kill -s INT "$p"
done
status=0
wait $job || status=$?
[ $status -eq 130 ] && grep -q '^train: SIGINT received: stopped after step [0-9]*; .*exiting with status 130$' "$dir.log" ||
  { tail -n 5 "$dir.log"; fail "SIGINT on rank 1: exit status $status, or rank 0 did not name SIGINT"; }

# A tensor-parallel save failing on one rank (injected, as a full disk there): that rank says why
# and ends the job at once, leaving no temporary file (it used to unwind into HDF5's collective
# close while the other rank waited in another collective: a hang).
status=0
TESSERA_FAULT_SAVE=1 timeout 120 mpirun -np 2 --oversubscribe "$tessera" train $common --set train.max_steps=6 \
  --set parallel.tensor=2 --set checkpoint.every=3 --set output.dir="$work/save_fails" > "$work/save_fails.log" 2>&1 ||
  status=$?
[ $status -ne 0 ] && [ $status -ne 124 ] || fail "a failed tensor-parallel save gave status $status (124: hung)"
[ "$(grep -c "error on rank 1: cannot write checkpoint '.*checkpoint_00000003\.h5\.tmp': writing '/model/.*' failed" \
  "$work/save_fails.log")" -eq 1 ] || { cat "$work/save_fails.log"; fail "the failed save was not reported once"; }
ls "$work/save_fails" | grep -q '\.tmp$' && fail "a failed save left its temporary file"

# Ranks that resume from different files under one name (node-local copies that differ; here an
# MPMD launch, each rank in its own folder): refused before any step, naming it, at dp=2 (the
# replicas would train apart, silently) and at tp=2 (it was a checksum failure).
mkdir -p "$work/mpmd/r0" "$work/mpmd/r1"
cp "$work/single/checkpoint_00000010.h5" "$work/mpmd/r0/ck.h5"
cp "$work/single/checkpoint_00000020.h5" "$work/mpmd/r1/ck.h5"
for layout in data tensor; do
  resume_each="$tessera train $common --set train.max_steps=30 --set parallel.$layout=2 --set output.dir=$work/mpmd/out_$layout --resume ck.h5"
  status=0
  timeout 120 mpirun --oversubscribe -np 1 -wdir "$work/mpmd/r0" $resume_each : -np 1 -wdir "$work/mpmd/r1" $resume_each \
    > "$work/mpmd/$layout.log" 2>&1 || status=$?
  [ $status -ne 0 ] && [ $status -ne 124 ] || fail "ranks resuming from different files at $layout=2 gave status $status"
  [ "$(grep -c "error.*: cannot \(resume from\|read checkpoint\) 'ck\.h5': .*give every rank the same checkpoint" \
    "$work/mpmd/$layout.log")" -eq 1 ] || { cat "$work/mpmd/$layout.log"; fail "different files at $layout=2: not said once"; }
  grep -q '^step ' "$work/mpmd/$layout.log" && fail "ranks resuming from different files at $layout=2 trained"
done

# --resume alone, with ranks that see other run folders (not one shared folder): rank 0 finds a
# checkpoint, rank 1 none. Refused at once, said once (rank 1 started from scratch: the first
# collectives did not line up, and the job waited out parallel.timeout_s).
mkdir -p "$work/mpmd2/r0/out" "$work/mpmd2/r1"
cp "$work/single/checkpoint_00000010.h5" "$work/mpmd2/r0/out/"
resume_each="$tessera train $common --set train.max_steps=30 --set parallel.data=2 --set output.dir=out --resume"
status=0
timeout 120 mpirun --oversubscribe -np 1 -wdir "$work/mpmd2/r0" $resume_each : -np 1 -wdir "$work/mpmd2/r1" $resume_each \
  > "$work/mpmd2/log" 2>&1 || status=$?
[ $status -ne 0 ] && [ $status -ne 124 ] || fail "ranks seeing other run folders gave status $status"
[ "$(grep -c "error: the checkpoint --resume continues from ('out/checkpoint_00000010\.h5' on rank 0) differs between the ranks: 1 of 2 ranks found another in output\.dir 'out' (or none)" \
  "$work/mpmd2/log")" -eq 1 ] || { cat "$work/mpmd2/log"; fail "ranks seeing other run folders: not said once"; }

# ... and every other way in which ranks see other run folders: decided together, said once, no
# rank left waiting (a rank that refused alone waited out parallel.timeout_s, or hung in MPI_Finalize).
folders() {  # folders NAME PATTERN FILE0 FILE1 ARGS...: rank r's out/ holds FILEr (- : nothing)
  name=$1 pattern=$2 && mkdir -p "$work/$name/r0/out" "$work/$name/r1/out"
  [ "$3" = - ] || cp "$work/single/checkpoint_00000010.h5" "$work/$name/r0/out/$3"
  [ "$4" = - ] || cp "$work/single/checkpoint_00000010.h5" "$work/$name/r1/out/$4"
  shift 4
  each="$tessera train $common --set train.max_steps=30 --set parallel.data=2 --set output.dir=out $*"
  status=0
  timeout 120 mpirun --oversubscribe -np 1 -wdir "$work/$name/r0" $each : -np 1 -wdir "$work/$name/r1" $each \
    > "$work/$name.log" 2>&1 || status=$?
  refused_once "$name" "$pattern"
}
folders folders_best "error: the checkpoint --resume continues from (none, but a checkpoint_best\.h5 on rank 0) differs between the ranks: 1 of 2 ranks found another" \
  checkpoint_best.h5 - --resume
folders folders_model "error: the checkpoint --resume continues from (none: starting from scratch on rank 0) differs between the ranks: 1 of 2 ranks found another" \
  - model.h5 --resume
folders folders_fresh "error: output\.dir 'out' already holds a run on 1 of 2 ranks, though not on rank 0" - model.h5
# A config error on one rank alone (a config file that differs between machines; here an MPMD
# launch): that rank says it, naming itself, and the job ends (it was said by none).
status=0
timeout 120 mpirun --oversubscribe -np 1 "$tessera" train $common --set parallel.data=2 --set output.dir="$work/one_bad" \
  : -np 1 "$tessera" train $common --set parallel.data=2 --set output.dir="$work/one_bad" --set model.d_ff=4 \
  > "$work/one_bad.log" 2>&1 || status=$?
refused_once one_bad "error on rank 1: --set model\.d_ff=4: 'model\.d_ff' = 4 is outside the allowed range"
# Every rank meets an error, but not the same: each that differs from rank 0's is said too (by its
# rank), and no rank is left waiting (no abort).
status=0
timeout 120 mpirun --oversubscribe -np 1 "$tessera" train $common --set parallel.data=2 --set output.dir="$work/two_bad" \
  --set model.d_ff=4 : -np 1 "$tessera" train $common --set parallel.data=2 --set output.dir="$work/two_bad" \
  --set model.d_ff=5 > "$work/two_bad.log" 2>&1 || status=$?
refused_once two_bad "^tessera: error: --set model\.d_ff=4: 'model\.d_ff' = 4 is outside"
[ "$(grep -c "^tessera: error on rank 1: --set model\.d_ff=5: 'model\.d_ff' = 5 is outside" "$work/two_bad.log")" -eq 1 ] \
  && ! grep -q MPI_ABORT "$work/two_bad.log" || { cat "$work/two_bad.log"; fail "two ranks' different config errors"; }

# A tensor-parallel checkpoint's /train attributes are group rank 0's: parallel HDF5 takes each
# attribute from any rank, and with each rank's own elapsed_seconds a 3-layer model's file held two
# ranks' fields and failed its checksum. It resumes in one process.
mpi 2 "$tessera" train $common --set model.layers=3 --set train.max_steps=2 --set checkpoint.every=2 \
  --set parallel.tensor=2 --set output.dir="$work/tp_layers3" > "$work/tp_layers3.log" 2>&1 ||
  { tail -n 5 "$work/tp_layers3.log"; fail "tp=2, 3 layers: training failed"; }
"$tessera" train $common --set model.layers=3 --set train.max_steps=3 --set output.dir="$work/tp_layers3_resumed" \
  --resume "$work/tp_layers3/checkpoint_00000002.h5" > "$work/tp_layers3_resumed.log" 2>&1 ||
  { tail -n 5 "$work/tp_layers3_resumed.log"; fail "a tp=2 checkpoint of 3 layers does not resume in one process"; }

# A rank that stops responding inside a tensor-parallel save (injected): the other waits in MPI-IO's
# collective write, which the collective timeout covers too: the job ends, non-zero, within 60 s,
# naming the save (it used to wait forever).
start=$(date +%s)
status=0
TESSERA_FAULT_SAVE_HANG=1 timeout 120 mpirun -np 2 --oversubscribe "$tessera" train $common --set train.max_steps=6 \
  --set parallel.tensor=2 --set checkpoint.every=3 --set parallel.timeout_s=5 --set output.dir="$work/save_hangs" \
  > "$work/save_hangs.log" 2>&1 || status=$?
took=$(( $(date +%s) - start ))
[ $status -ne 0 ] && [ $status -ne 124 ] || fail "a rank hung in a tensor-parallel save gave status $status (124: hung)"
[ $took -le 60 ] || fail "the job took $took s to end with a rank hung in a save"
grep -q "error on rank 0: a tensor-parallel checkpoint save (MPI-IO, this rank's own writes included) has waited [0-9]* s (parallel.timeout_s = 5)" \
  "$work/save_hangs.log" || { cat "$work/save_hangs.log"; fail "no timeout message naming the save"; }
ls "$work/save_hangs" | grep -q '^checkpoint_.*\.h5$' && fail "a save cut by the timeout left a checkpoint"
echo "rank hung in a save: the job ended with status $status after $took s"
# ... and inside a tensor-parallel load (a resume of the 3-layer checkpoint above).
start=$(date +%s)
status=0
TESSERA_FAULT_LOAD_HANG=1 timeout 120 mpirun -np 2 --oversubscribe "$tessera" train $common --set model.layers=3 \
  --set train.max_steps=4 --set parallel.tensor=2 --set parallel.timeout_s=5 --set output.dir="$work/load_hangs" \
  --resume "$work/tp_layers3/checkpoint_00000002.h5" > "$work/load_hangs.log" 2>&1 || status=$?
took=$(( $(date +%s) - start ))
[ $status -ne 0 ] && [ $status -ne 124 ] || fail "a rank hung in a tensor-parallel load gave status $status (124: hung)"
[ $took -le 60 ] || fail "the job took $took s to end with a rank hung in a load"
grep -q "error on rank 0: a tensor-parallel checkpoint load (MPI-IO, this rank's own reads included) has waited [0-9]* s (parallel.timeout_s = 5)" \
  "$work/load_hangs.log" || { cat "$work/load_hangs.log"; fail "no timeout message naming the load"; }
grep -q '^step ' "$work/load_hangs.log" && fail "a resume whose load timed out trained"
echo "rank hung in a load: the job ended with status $status after $took s"

# Kill one rank of four mid-run: the job ends, non-zero, within 60 s.
mpi 4 "$tessera" train $common --set train.max_steps=1000000 --set parallel.data=4 --set output.dir="$work/killed" \
  > "$work/killed.log" 2>&1 &
job=$!
i=0
until grep -q '^step 3 ' "$work/killed.log"; do
  i=$((i + 1)); [ $i -lt 600 ] || { kill -9 $job; fail "no progress"; }; sleep 0.1
done
victim=$(pgrep -f "output.dir=$work/killed" | grep -v "^$job\$" | tail -n 1)
[ -n "$victim" ] || fail "no rank process found"
kill -9 "$victim"
start=$(date +%s)
status=0
wait $job || status=$?
took=$(( $(date +%s) - start ))
[ $status -ne 0 ] || fail "the job exited 0 after a rank was killed"
[ $took -le 60 ] || fail "the job took $took s to end after a rank was killed"
echo "killed rank $victim: the job ended with status $status after $took s"

# A rank that stops responding (injected: rank 2 sleeps at step 3): the others' collective
# timeout ends the job, non-zero, within 60 s, naming the collective.
start=$(date +%s)
status=0
TESSERA_FAULT_HANG=2:3 mpi 4 "$tessera" train $common --set train.max_steps=1000000 --set parallel.data=4 \
  --set parallel.timeout_s=5 --set output.dir="$work/hung" > "$work/hung.log" 2>&1 || status=$?
took=$(( $(date +%s) - start ))
[ $status -ne 0 ] || fail "the job exited 0 with a hung rank"
[ $took -le 60 ] || fail "the job took $took s to end with a hung rank"
grep -q "has waited [0-9]* s (parallel.timeout_s = 5): another rank has died or hangs" "$work/hung.log" \
  || { cat "$work/hung.log"; fail "no timeout message"; }
echo "hung rank: the job ended with status $status after $took s"

# ... and a rank stuck in the setup (injected: rank 1 sleeps before MPI starts, before the ranks per
# machine are counted, or before the parallel groups are split off): the others' first wait times
# out too, naming it.
for stage in "mpi:MPI start (MPI_Init_thread, MPI_Comm_dup)" "local:local_rank (MPI_Comm_split_type)" "split:split"; do
  start=$(date +%s) status=0
  TESSERA_FAULT_SETUP_HANG="1:${stage%%:*}" timeout 120 mpirun -np 2 --oversubscribe "$tessera" train $common \
    --set parallel.tensor=2 --set parallel.timeout_s=5 --set output.dir="$work/setup_hangs" \
    > "$work/setup_hangs.log" 2>&1 || status=$?
  took=$(( $(date +%s) - start ))
  [ $status -ne 0 ] && [ $status -ne 124 ] || fail "a rank hung at setup stage '${stage%%:*}' gave status $status (124: hung)"
  [ $took -le 60 ] || fail "the job took $took s to end with a rank hung at setup stage '${stage%%:*}'"
  grep -qF "error on rank 0: ${stage#*:} has waited" "$work/setup_hangs.log" ||
    { cat "$work/setup_hangs.log"; fail "no timeout message naming '${stage#*:}'"; }
  echo "rank hung at setup stage '${stage%%:*}': the job ended with status $status after $took s"
done
echo PASS
