#!/bin/sh
# train.patience: a run whose validation score stops improving (here: learning rate 0, so it never
# improves after the first validation) stops after that many validations without a better one,
# exit 0, with its final files; the count survives a resume (from a checkpoint one validation
# short of the limit, it stops at the next one), and an end-of-run validation off the valid_every
# schedule does not count; patience 0 trains on to train.max_steps.
# Usage: early_stopping.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
dir="$work/run"
args="--config $config --set output.dir=$dir --set train.lr_factor=0 --set train.max_steps=40 --set train.log_every=1 --set train.valid_every=2 --set checkpoint.every=2 --set checkpoint.keep_last=0 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=20"

"$tessera" train $args --set train.patience=2 > "$work/stop.log" 2>&1 || { cat "$work/stop.log"; fail "the run failed"; }
grep "stopping early" "$work/stop.log" || true
[ "$(grep -c '^train: stopping early at step 6: 2 validations in a row without a better exact match than 0.00% (step 2; train.patience); '"$dir"'/checkpoint_best.h5 holds that model$' "$work/stop.log")" -eq 1 ] \
  || { cat "$work/stop.log"; fail "no early stop at step 6 (exactly one message)"; }
! grep -q '^step 7 ' "$work/stop.log" || fail "trained past the early stop"
# The step it stops at is logged, although train.log_every (4) ends no window there.
"$tessera" train $args --set train.patience=2 --set train.log_every=4 --set output.dir="$work/logged" > "$work/logged.log" 2>&1 ||
  { cat "$work/logged.log"; fail "the log_every 4 run failed"; }
[ "$(grep -o '^{"step": [0-9]*, "epoch"' "$work/logged/metrics.jsonl" | tr -d '\n')" = '{"step": 4, "epoch"{"step": 6, "epoch"' ] ||
  { cat "$work/logged.log"; fail "the step of the early stop was not logged"; }
[ "$(grep -c '^valid ' "$work/stop.log")" -eq 3 ] || fail "not exactly 3 validations (steps 2, 4, 6: none repeated at the end)"
for f in model.h5 checkpoint_best.h5 checkpoint_00000006.h5; do [ -e "$dir/$f" ] || fail "no $f"; done

# From step 4 (one validation without progress so far): the next validation makes two.
"$tessera" train $args --set train.patience=2 --resume "$dir/checkpoint_00000004.h5" > "$work/resumed.log" 2>&1 \
  || { cat "$work/resumed.log"; fail "resume failed"; }
grep -q '^train: stopping early at step 6: 2 validations' "$work/resumed.log" \
  || { cat "$work/resumed.log"; fail "the resumed run did not count the validation before the checkpoint"; }

"$tessera" train $args --set train.patience=0 --set train.max_steps=10 --resume > "$work/off.log" 2>&1 \
  || { cat "$work/off.log"; fail "resume with patience 0 failed"; }
! grep -q 'stopping early' "$work/off.log" || fail "stopped early with train.patience 0"
grep -q '^step 10 ' "$work/off.log" || fail "patience 0 did not train to train.max_steps"
# The end-of-run validation at step 3 is off the valid_every=2 schedule: extended by --resume, the
# run stops where one that never stopped does (step 6), not a validation earlier.
ext="--set output.dir=$work/extended"
"$tessera" train $args $ext --set train.patience=2 --set train.max_steps=3 > "$work/short.log" 2>&1 ||
  { cat "$work/short.log"; fail "the 3-step run failed"; }
"$tessera" train $args $ext --set train.patience=2 --resume > "$work/extended.log" 2>&1 ||
  { cat "$work/extended.log"; fail "the extended run failed"; }
grep -q '^train: stopping early at step 6: 2 validations' "$work/extended.log" ||
  { cat "$work/extended.log"; fail "the off-schedule validation at the end counted toward train.patience"; }
status=0
"$tessera" train $args --set train.patience=2 --set train.valid_every=0 > "$work/clash.log" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "error: --set train.patience=2, --set train.valid_every=0: train.patience = 2 counts validations during training, but train.valid_every is 0" "$work/clash.log" \
  || { cat "$work/clash.log"; fail "patience without validations was not refused"; }
# A SIGTERM during the validation of step 4 (injected: it stops the decoding): the run saves step 4
# and exits 143; the resume runs that validation first and stops at step 6, as the run that never
# stopped did (without it, the count would miss one and the run go on to step 8).
status=0
TESSERA_FAULT_SIGNAL=0:4 "$tessera" train $args --set output.dir="$work/sig" --set train.patience=2 \
  > "$work/sig.log" 2>&1 || status=$?
[ $status -eq 143 ] && grep -q '^valid 4: interrupted by a stop signal (no score)$' "$work/sig.log" ||
  { cat "$work/sig.log"; fail "the SIGTERM did not interrupt the validation of step 4 (status $status)"; }
"$tessera" train $args --set output.dir="$work/sig" --set train.patience=2 --resume > "$work/sig_resumed.log" 2>&1 ||
  { cat "$work/sig_resumed.log"; fail "the resume after the interrupted validation failed"; }
grep -q '^train: step 4 has not been validated (a stop signal cut its validation short, or train.valid_every changed): validating it first$' "$work/sig_resumed.log" &&
  grep -q '^valid 4 ' "$work/sig_resumed.log" && grep -q '^train: stopping early at step 6: 2 validations' "$work/sig_resumed.log" ||
  { cat "$work/sig_resumed.log"; fail "the interrupted validation was not run first on resume"; }
[ "$(grep -c '"valid_loss"' "$work/sig/metrics.jsonl")" -eq 3 ] || fail "not 3 validations (2, 4, 6) in metrics.jsonl"
# A resume of the run that stopped early trains and validates nothing more.
"$tessera" train $args --set output.dir="$work/sig" --set train.patience=2 --resume > "$work/sig_again.log" 2>&1 ||
  { cat "$work/sig_again.log"; fail "the resume of the finished run failed"; }
grep -q '^train: train.patience = 2 was reached before this resume (2 validations without a better score since step 2): no step more; '"$work"'/sig/checkpoint_best.h5 holds that model$' \
  "$work/sig_again.log" || { cat "$work/sig_again.log"; fail "no message for a resume of a run that stopped early"; }
! grep -q '^checkpoint: saved ' "$work/sig_again.log" || { cat "$work/sig_again.log"; fail "the finished run saved its checkpoint again"; }
grep -Eq '^(valid|step) ' "$work/sig_again.log" && { cat "$work/sig_again.log"; fail "the finished run trained or validated again"; }
# A fork of the run (resumed into another output.dir at its last step) validates that step again
# for its own log, but does not count it toward train.patience a second time; the best model it
# reports is the source folder's checkpoint_best.h5.
"$tessera" train $args --set output.dir="$work/fork" --set train.patience=2 --set train.max_steps=6 \
  --resume "$work/sig/checkpoint_00000006.h5" > "$work/fork.log" 2>&1 || { cat "$work/fork.log"; fail "the fork failed"; }
grep -q '^valid 6 ' "$work/fork.log" || { cat "$work/fork.log"; fail "the fork did not validate its step"; }
# The best model (step 2) is not in the fork's folder: the message names the file that holds it.
grep -q '^train: train.patience = 2 was reached before this resume (2 validations without a better score since step 2): no step more; '"$work"'/sig/checkpoint_best.h5 holds that model$' \
  "$work/fork.log" || { cat "$work/fork.log"; fail "the fork's message does not name the source folder's checkpoint_best.h5"; }
[ ! -e "$work/fork/checkpoint_best.h5" ] || fail "the fork has a checkpoint_best.h5 of its own"
for f in "$work/sig/checkpoint_00000006.h5" "$work/fork/checkpoint_00000006.h5"; do
  h5dump -a /train/validations_since_best "$f" | sed -n 's/^ *(0): //p'
done > "$work/fork.counts"
[ "$(tr '\n' ' ' < "$work/fork.counts")" = "2 2 " ] || fail "the fork counted its repeat validation: $(cat "$work/fork.counts")"
# train.best_metric = ppl: the same stop by perplexity (lower is better; an equal one is no better).
"$tessera" train $args --set output.dir="$work/ppl" --set train.patience=2 --set train.best_metric=ppl > "$work/ppl.log" 2>&1 ||
  { cat "$work/ppl.log"; fail "the ppl run failed"; }
grep -Eq '^train: stopping early at step 6: 2 validations in a row without a better perplexity than [0-9.]+ \(step 2; train.patience\)' \
  "$work/ppl.log" || { cat "$work/ppl.log"; fail "no early stop by perplexity at step 6"; }
# ... and with learning: checkpoint_best.h5 is the step of the lowest validation perplexity.
"$tessera" train $args --set output.dir="$work/ppl_learn" --set train.lr_factor=1 --set train.max_steps=8 \
  --set train.best_metric=ppl > "$work/ppl_learn.log" 2>&1 || { cat "$work/ppl_learn.log"; fail "the learning ppl run failed"; }
lowest=$(sed -n 's/^{"step": \([0-9]*\), "valid_loss": [^,]*, "valid_ppl": \([0-9.e+-]*\),.*/\2 \1/p' "$work/ppl_learn/metrics.jsonl" |
  sort -g | head -n 1 | cut -d' ' -f2)
best_step=$(h5dump -a /train/step "$work/ppl_learn/checkpoint_best.h5" | sed -n 's/^ *(0): //p')
[ -n "$lowest" ] && [ "$best_step" = "$lowest" ] || fail "checkpoint_best.h5 is step $best_step, the lowest perplexity step $lowest"
# ... and by exact match (higher is better; the default train.best_metric) on a task small enough
# that it rises and falls within 40 steps: checkpoint_best.h5 is the first step of the highest.
"$tessera" train $args --set output.dir="$work/acc_learn" --set train.lr_factor=2 --set train.warmup=10 \
  --set train.valid_every=4 --set checkpoint.every=0 --set data.synthetic_vocab=3 --set data.synthetic_min_len=1 \
  --set data.synthetic_max_len=3 --set data.synthetic_valid_size=40 --set model.dropout=0 > "$work/acc_learn.log" 2>&1 ||
  { cat "$work/acc_learn.log"; fail "the learning exact-match run failed"; }
sed -n 's/^{"step": \([0-9]*\), "valid_loss": .*"valid_accuracy": \([0-9.e+-]*\),.*/\2 \1/p' "$work/acc_learn/metrics.jsonl" \
  > "$work/acc_learn.scores"
[ "$(cut -d' ' -f1 "$work/acc_learn.scores" | sort -u | wc -l)" -gt 1 ] ||
  { cat "$work/acc_learn.scores"; fail "the exact match never changed: the check below proves nothing"; }
highest=$(sort -s -k1,1gr "$work/acc_learn.scores" | head -n 1 | cut -d' ' -f2)
best_step=$(h5dump -a /train/step "$work/acc_learn/checkpoint_best.h5" | sed -n 's/^ *(0): //p')
[ -n "$highest" ] && [ "$best_step" = "$highest" ] ||
  { cat "$work/acc_learn.scores"; fail "checkpoint_best.h5 is step $best_step, the first highest exact match step $highest"; }
# Another metric on resume is refused (the best score and the count are of the run's metric);
# chrF needs a translation task.
status=0
"$tessera" train $args --set output.dir="$work/ppl_learn" --set train.lr_factor=1 --set train.max_steps=10 --resume \
  > "$work/metric_change.log" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "another train.best_metric = ppl there, bleu in this config" "$work/metric_change.log" ||
  { cat "$work/metric_change.log"; fail "a resume with another train.best_metric was not refused"; }
status=0
"$tessera" train $args --set output.dir="$work/chrf" --set train.best_metric=chrf > "$work/chrf.log" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "train.best_metric = chrf needs a translation task" "$work/chrf.log" ||
  { cat "$work/chrf.log"; fail "chrf on a synthetic task was not refused"; }
echo "PASS: stopped early at step 6 after 2 validations without progress; the count survives a resume; 0 turns it off; by perplexity too"
