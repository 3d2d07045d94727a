#!/bin/sh
# train.max_epochs: the run stops after that many passes over the data (exit 0, its final files),
# logs its last steps although they do not end a train.log_every window, with eta 0 there; its eta
# counts the epochs left, not train.max_steps; a resume with more epochs trains exactly one epoch
# of batches more; a resume whose epoch has fewer batches than the position it stopped at is refused.
# Usage: max_epochs.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
dir="$work/run"
args="--config $config --set output.dir=$dir --set train.max_steps=100000 --set train.valid_every=0 --set checkpoint.every=0 --set data.synthetic_train_size=300 --set data.synthetic_valid_size=20 --set train.batch_tokens=1024"
"$tessera" train $args --set train.max_epochs=2 --set train.log_every=5 > "$work/two.log" 2>&1 ||
  { cat "$work/two.log"; fail "the run failed"; }
grep -E '^(step|train:|model:)' "$work/two.log" | cut -c1-100
per_epoch=$(sed -n 's/^model: .*; \([0-9]*\) batches per epoch$/\1/p' "$work/two.log")
[ -n "$per_epoch" ] && [ $((2 * per_epoch % 5)) -ne 0 ] ||
  fail "$per_epoch batches per epoch: the last step would end a log window anyway, the check below proves nothing"
last=$((2 * per_epoch))
grep -qx "train: stopping after 2 epochs (train.max_epochs)" "$work/two.log" || fail "no stop after 2 epochs"
grep -q "^step $last | epoch 2 | " "$work/two.log" || fail "the last step ($last) was not logged"
grep -q "^step $((last + 1)) " "$work/two.log" && fail "trained past the last epoch"
[ -e "$dir/model.h5" ] && [ -e "$dir/checkpoint_$(printf %08d $last).h5" ] || fail "no final files"
# eta: 0 at the last step; before it, about the time of the steps left (not of 100,000 steps).
sed -n 's/.*"step": \([0-9]*\),.*"elapsed_s": \([-0-9.e+]*\), "eta_s": \([-0-9.e+]*\)}$/\1 \2 \3/p' "$dir/metrics.jsonl" > "$work/eta.txt"
cat "$work/eta.txt"
awk -v last=$last '$1 == last { final = $3 } $1 == 5 { first = $3; el = $2 }
  END { exit !(final == 0 && first > 0 && first < 100 * (el + 1)) }' "$work/eta.txt" ||
  fail "eta is not 0 at the last step, or counts train.max_steps instead of the epochs left"

"$tessera" train $args --set train.max_epochs=3 --set train.log_every=1000 --resume > "$work/three.log" 2>&1 ||
  { cat "$work/three.log"; fail "the resume failed"; }
grep -q "^step $((last + per_epoch)) | epoch 3 | " "$work/three.log" && grep -qx "train: stopping after 3 epochs (train.max_epochs)" "$work/three.log" ||
  { cat "$work/three.log"; fail "the resume did not train one more epoch ($per_epoch steps) and stop"; }
# Resumed at the end of its last epoch: no step more (the limit is checked before each batch).
"$tessera" train $args --set train.max_epochs=3 --set train.log_every=1 --resume > "$work/again.log" 2>&1 ||
  { cat "$work/again.log"; fail "the resume of the finished run failed"; }
grep -q '^step ' "$work/again.log" && { cat "$work/again.log"; fail "a run resumed at the end of its last epoch trained on"; }
grep -qx "train: train.max_epochs = 3 was reached before this resume: no step more" "$work/again.log" ||
  { cat "$work/again.log"; fail "no stop message on the finished run"; }

# Two batches an update, an odd count an epoch: the last update takes one batch, and is logged
# with its epoch (1), not the next.
"$tessera" train $args --set output.dir="$work/acc" --set train.accumulate=2 --set train.max_epochs=1 \
  --set data.synthetic_train_size=400 --set train.log_every=100 > "$work/acc.log" 2>&1 ||
  { cat "$work/acc.log"; fail "the accumulate run failed"; }
acc_batches=$(sed -n 's/^model: .*; \([0-9]*\) batches per epoch$/\1/p' "$work/acc.log")
[ $((acc_batches % 2)) -eq 1 ] || fail "$acc_batches batches per epoch: even, the check below proves nothing"
grep -q "^step $(((acc_batches + 1) / 2)) | epoch 1 | " "$work/acc.log" &&
  grep -qx "train: stopping after 1 epoch (train.max_epochs)" "$work/acc.log" ||
  { cat "$work/acc.log"; fail "the last update of an odd epoch was not logged as epoch 1"; }

# No update spans two epochs: two epochs in one run equal one epoch, then a resume with
# train.max_epochs 2 (the same losses at every step, bit-identical weights). With updates across
# the boundary, the stopped run's last update took one batch and the uninterrupted run's two.
acc="$args --set train.accumulate=2 --set data.synthetic_train_size=400 --set train.log_every=1"
"$tessera" train $acc --set output.dir="$work/acc_two" --set train.max_epochs=2 > "$work/acc_two.log" 2>&1 ||
  { cat "$work/acc_two.log"; fail "the two-epoch accumulate run failed"; }
"$tessera" train $acc --set output.dir="$work/acc_resumed" --set train.max_epochs=1 > /dev/null 2>&1 &&
  "$tessera" train $acc --set output.dir="$work/acc_resumed" --set train.max_epochs=2 --resume > "$work/acc_resumed.log" 2>&1 ||
  { cat "$work/acc_resumed.log"; fail "the one-epoch accumulate run or its resume failed"; }
step_losses() { sed -n 's/^{"step": \([0-9]*\), "epoch": [0-9]*, "loss": \([^,]*\),.*/\1 \2/p' "$1" | sort -n | uniq; }
step_losses "$work/acc_two/metrics.jsonl" > "$work/acc_two.losses"
step_losses "$work/acc_resumed/metrics.jsonl" > "$work/acc_resumed.losses"
grep -q "resumed from .* at step $(((acc_batches + 1) / 2)) " "$work/acc_resumed.log" ||
  { cat "$work/acc_resumed.log"; fail "the one-epoch run did not stop after $(((acc_batches + 1) / 2)) updates"; }
cmp -s "$work/acc_two.losses" "$work/acc_resumed.losses" ||
  { diff "$work/acc_two.losses" "$work/acc_resumed.losses" | head; fail "stopped at an epoch's end and resumed: other losses"; }
h5diff "$work/acc_two/model.h5" "$work/acc_resumed/model.h5" /model /model > /dev/null ||
  fail "stopped at an epoch's end and resumed: other weights"

# train.max_minutes (here 0.3 s): the run stops at the step that reaches it, logged with eta 0; a
# resume of it takes no step more.
"$tessera" train $args --set output.dir="$work/minutes" --set train.max_minutes=0.005 --set train.log_every=1000 \
  > "$work/minutes.log" 2>&1 || { cat "$work/minutes.log"; fail "the max_minutes run failed"; }
grep -q "^train: stopping at step [0-9]*: train.max_minutes = 0.005 reached$" "$work/minutes.log" ||
  { cat "$work/minutes.log"; fail "no stop at train.max_minutes"; }
grep -q '^step [0-9]* | .* | eta 0s$' "$work/minutes.log" || fail "the last step was not logged with eta 0"
grep -q '"eta_s": -' "$work/minutes/metrics.jsonl" && fail "a negative eta_s in metrics.jsonl"
"$tessera" train $args --set output.dir="$work/minutes" --set train.max_minutes=0.005 --set train.log_every=1 --resume \
  > "$work/minutes_again.log" 2>&1 || { cat "$work/minutes_again.log"; fail "the resume of the max_minutes run failed"; }
grep -q "^train: train.max_minutes = 0.005 was reached before this resume ([^)]*): no step more$" "$work/minutes_again.log" ||
  { cat "$work/minutes_again.log"; fail "no message for a resume past train.max_minutes"; }
grep -Eq '^(step|valid) ' "$work/minutes_again.log" && { cat "$work/minutes_again.log"; fail "a resume past train.max_minutes trained or validated"; }

# A run that ends on max_epochs (or max_minutes) with a checkpoint at its last step and its final
# validation after it: the checkpoint is saved again, so a resume validates nothing again.
for limit in train.max_epochs=1 train.max_minutes=0.005; do
  rm -rf "$work/end"
  "$tessera" train $args --set output.dir="$work/end" --set $limit --set checkpoint.every=1 --set train.valid_every=4 \
    --set train.log_every=1000 > "$work/end.log" 2>&1 || { cat "$work/end.log"; fail "$limit: the run failed"; }
  "$tessera" train $args --set output.dir="$work/end" --set $limit --set checkpoint.every=1 --set train.valid_every=4 \
    --set train.log_every=1000 --resume > "$work/end_again.log" 2>&1 || { cat "$work/end_again.log"; fail "$limit: the resume failed"; }
  grep -Eq '^(valid|step) |has not been validated' "$work/end_again.log" &&
    { cat "$work/end_again.log"; fail "$limit: the resume of the ended run validated or trained again"; }
done

# A resume whose epoch has fewer batches than the position it stopped at (5 of 6; now 1): refused.
"$tessera" train $args --set output.dir="$work/mid" --set train.max_steps=5 > "$work/mid.log" 2>&1 ||
  { cat "$work/mid.log"; fail "the run to step 5 failed"; }
# A resume at a step past a lowered train.max_steps: said, no step taken.
"$tessera" train $args --set output.dir="$work/mid" --set train.max_steps=3 --resume > "$work/lowered.log" 2>&1 ||
  { cat "$work/lowered.log"; fail "the resume past a lowered train.max_steps failed"; }
grep -qx "train: train.max_steps = 3 was reached before this resume (the checkpoint is at step 5): no step more" \
  "$work/lowered.log" && ! grep -q '^step ' "$work/lowered.log" || { cat "$work/lowered.log"; fail "a lowered train.max_steps: not said, or trained"; }
if "$tessera" train $args --set output.dir="$work/mid" --set train.max_steps=8 --set train.batch_tokens=100000 \
  --resume > "$work/fewer.log" 2>&1; then
  cat "$work/fewer.log"; fail "a resume past the end of its epoch's batches trained"
fi
grep -q "cannot resume from '$work/mid/checkpoint_00000005.h5': it stopped after batch 5 of epoch 1, but this config's data gives that epoch 1 batches (data.max_len, train.batch_tokens or the training text differ from the run's)" \
  "$work/fewer.log" || { cat "$work/fewer.log"; fail "no clear error for a position past the epoch's batches"; }
echo PASS
