#!/bin/sh
# Bit-exact resume: a run killed with SIGKILL mid-training and resumed with --resume gives the
# same loss at every step after the checkpoint it resumed from, and the same final weights and
# Adam moments, as a run that was never interrupted. Dropout is on.
# Usage: resume_after_sigkill.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
run() {  # run OUTPUT_DIR [extra args...]; with exec=exec set, tessera replaces the calling (sub)shell
  dir=$1 && shift
  ${exec:-} "$tessera" train --config "$config" --set output.dir="$dir" --set model.dropout=0.1 --set train.max_steps=60 \
    --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=10 --set checkpoint.keep_last=0 \
    --set checkpoint.keep_best=false --set data.synthetic_train_size=3000 "$@"
}
run "$work/straight" > "$work/straight.log"

# exec: $! must be tessera itself. A backgrounded shell function is a subshell whose SIGKILL would
# leave tessera running on, writing into the folder the resumed run writes too.
(exec=exec; run "$work/killed") > "$work/killed.log" &
pid=$!
# Kill it as soon as its second checkpoint is complete (renamed into place), mid-run.
i=0
while [ ! -e "$work/killed/checkpoint_00000020.h5" ]; do
  i=$((i + 1))
  [ $i -lt 1200 ] || { echo "no checkpoint after 120 s"; kill -9 $pid; exit 1; }
  sleep 0.1
done
kill -9 $pid
wait $pid && { echo "the run finished before it was killed"; exit 1; } || true
[ ! -e "$work/killed/model.h5" ] || { echo "the run finished before it was killed"; exit 1; }
ls "$work/killed"

# What a kill during a save leaves (the temporary of a checkpoint, of the best, of model.h5) goes at
# the next start; another .tmp file in the folder is not ours and stays, even an .h5 one (another
# tool's file in progress, e.g. `tessera average -o` into the folder).
for f in checkpoint_00000099.h5.tmp checkpoint_best.h5.tmp model.h5.tmp notes.tmp avg.h5.tmp; do
  echo partial > "$work/killed/$f"
done
run "$work/killed" --resume > "$work/resumed.log"
for f in checkpoint_00000099.h5.tmp checkpoint_best.h5.tmp model.h5.tmp; do
  [ ! -e "$work/killed/$f" ] || { echo "FAIL: the leftover $f was not removed"; exit 1; }
done
for f in notes.tmp avg.h5.tmp; do
  [ -e "$work/killed/$f" ] || { echo "FAIL: $f, not a train's temporary, was removed"; exit 1; }
done
grep "resumed from" "$work/resumed.log"
resumed_step=$(sed -n 's/.*resumed from .* at step \([0-9]*\).*/\1/p' "$work/resumed.log")
[ "$resumed_step" -ge 20 ] && [ "$resumed_step" -lt 60 ] || { echo "FAIL: resumed at step $resumed_step, not from a checkpoint of 20 to 59"; exit 1; }

# Per-step losses (the last line written for each step wins: steps the killed run did after its
# last checkpoint are done again by the resumed run).
losses() { sed -n 's/^{"step": \([0-9]*\), "epoch": [0-9]*, "loss": \([^,]*\),.*/\1 \2/p' "$1" | awk '{l[$1]=$2} END {for (s in l) print s, l[s]}' | sort -n; }
losses "$work/straight/metrics.jsonl" > "$work/straight.losses"
losses "$work/killed/metrics.jsonl" > "$work/resumed.losses"
[ "$(wc -l < "$work/straight.losses")" -eq 60 ]
if ! cmp "$work/straight.losses" "$work/resumed.losses"; then
  diff "$work/straight.losses" "$work/resumed.losses" | head
  echo "FAIL: losses differ"; exit 1
fi
# Final weights and optimizer state: exactly equal (h5diff without a tolerance).
h5diff -r "$work/straight/model.h5" "$work/killed/model.h5" /model /model > /dev/null || { echo "FAIL: weights differ"; exit 1; }
h5diff "$work/straight/checkpoint_00000060.h5" "$work/killed/checkpoint_00000060.h5" /optimizer /optimizer > /dev/null \
  || { echo "FAIL: Adam moments differ"; exit 1; }
echo "PASS: resumed at step $resumed_step; 60 losses, weights and Adam moments bit-identical"
