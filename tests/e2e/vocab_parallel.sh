#!/bin/sh
# parallel.vocab_parallel under mpirun (float32, label smoothing 0.1, a vocabulary of 25 ids that
# tp=2 and tp=4 split unevenly):
#  - tp=2 and tp=4 train with one process's losses and gradient norms for 20 steps, and validate
#    (loss and greedy decoding) with its validation loss;
#  - separate embeddings and output layer (share_embeddings and tie_output false) at tp=2 too;
#  - the checkpoint holds the full tensors, in the layout of one process's;
#  - a vocabulary-parallel tp=2 checkpoint resumes in one process, and one process's at tp=2, with
#    the same losses; `translate` reads it as any other checkpoint.
# Usage: vocab_parallel.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$(dirname "$0")/same_losses.sh"
common="--config $config --set model.dropout=0 --set train.log_every=1 --set train.valid_every=10 --set data.synthetic_vocab=21 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=20 --set train.label_smoothing=0.1 --set checkpoint.keep_best=false --set train.max_steps=20 --set checkpoint.every=10"
run() {  # run NAME NP [--set ...]
  name=$1 np=$2 && shift 2
  mpirun -np "$np" --oversubscribe "$tessera" train $common --set output.dir="$work/$name" "$@" > "$work/$name.log" 2>&1 \
    || { cat "$work/$name.log"; fail "$name"; }
}
valid_losses() { sed -n 's/.*"step": \([0-9]*\), "valid_loss": \([^,]*\),.*/\1 \2/p' "$1"; }
same_valid_losses() {
  valid_losses "$1" > "$work/va.txt" && valid_losses "$2" > "$work/vb.txt"
  join "$work/va.txt" "$work/vb.txt" | awk -v name="$2" '{ n++; d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5 * $2) bad++ }
    END { if (n != 2 || bad > 0) { print "FAIL: " name ": validation losses differ"; exit 1 } }'
}

run single 1
for tp in 2 4; do
  run "vp$tp" $tp --set parallel.tensor=$tp --set parallel.vocab_parallel=true
  same_losses "$work/single/metrics.jsonl" "$work/vp$tp/metrics.jsonl" 1
  same_valid_losses "$work/single/metrics.jsonl" "$work/vp$tp/metrics.jsonl"
  grep -q "^valid 20 | .* exact match " "$work/vp$tp.log" || fail "tp=$tp: no greedy decoding at validation"
  [ "$(grep '^model: ' "$work/vp$tp.log")" = "$(grep '^model: ' "$work/single.log")" ] ||
    fail "tp=$tp: the model line differs from one process's: $(grep '^model: ' "$work/vp$tp.log")"
done
untied="--set model.share_embeddings=false --set model.tie_output=false"
run untied 1 $untied
run untied_vp2 2 $untied --set parallel.tensor=2 --set parallel.vocab_parallel=true
same_losses "$work/untied/metrics.jsonl" "$work/untied_vp2/metrics.jsonl" 1

# The same datasets and shapes as one process's checkpoint.
for f in single vp2; do h5ls -r "$work/$f/checkpoint_00000010.h5" > "$work/$f.h5ls"; done
cmp "$work/single.h5ls" "$work/vp2.h5ls" || fail "a vocabulary-parallel checkpoint has another layout"
grep -q '^/model/embed_tokens\.weight  *Dataset {25, 64}$' "$work/vp2.h5ls" || fail "not the full embedding"

resume() {  # resume NAME FROM_CHECKPOINT NP [--set ...]
  name=$1 from=$2 np=$3 && shift 3
  mkdir -p "$work/$name"
  run "$name" "$np" --resume "$from" "$@"
  grep -q "resumed from .* at step 10 " "$work/$name.log" || fail "$name did not start at step 10"
  same_losses "$work/single/metrics.jsonl" "$work/$name/metrics.jsonl" 11
}
resume vp2_to_single "$work/vp2/checkpoint_00000010.h5" 1
resume single_to_vp2 "$work/single/checkpoint_00000010.h5" 2 --set parallel.tensor=2 --set parallel.vocab_parallel=true

printf '1 2 3 4 5 6\n7 8 9 10 11 12 13\n' > "$work/src.txt"
"$tessera" translate --checkpoint "$work/vp2/model.h5" -i "$work/src.txt" -o "$work/out.txt" > "$work/translate.log" 2>&1 \
  || { cat "$work/translate.log"; fail "translate of a vocabulary-parallel checkpoint"; }
[ "$(wc -l < "$work/out.txt")" -eq 2 ] || fail "translate wrote $(wc -l < "$work/out.txt") lines, not 2"
echo PASS
