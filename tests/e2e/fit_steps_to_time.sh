#!/bin/sh
# train.fit_steps_to_time: after warmup the run sets max_steps to the steps that fit in
# train.max_minutes and its linear schedule reaches lr 0 there (or, when the machine slowed down,
# max_minutes stops it first); a resume keeps the fitted max_steps; without max_minutes the key
# is refused.
# Usage: fit_steps_to_time.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
args="--config $config --set train.lr_schedule=linear --set train.warmup=24 --set train.log_every=10 --set train.valid_every=0 --set checkpoint.every=40 --set data.synthetic_train_size=3000 --set data.synthetic_valid_size=20 --set train.batch_tokens=1024"

"$tessera" train $args --set output.dir="$work/run" --set train.max_minutes=0.5 --set train.fit_steps_to_time=true \
  > "$work/run.log" 2>&1 || { cat "$work/run.log"; fail "the fitted run failed"; }
grep -E '^(step|train:)' "$work/run.log" | cut -c1-120
fitted=$(sed -n 's/^train: train.fit_steps_to_time: .* s per step over steps 4-24, .* left: max_steps \([0-9]*\) (train.max_steps 1500)$/\1/p' "$work/run.log")
[ -n "$fitted" ] && [ "$fitted" -gt 24 ] && [ "$fitted" -lt 1500 ] || fail "no fit after step 24 (warmup), or max_steps not lowered: '$fitted'"
grep -q "\"fitted_max_steps\": $fitted, \"step\": 24," "$work/run/metrics.jsonl" || fail "metrics.jsonl has no record of the fit"
last=$(sed -n 's/^train: saved .*model.h5 after \([0-9]*\) steps.*/\1/p' "$work/run.log")
if grep -q "^train: stopping at step $last: train.max_minutes = 0.5 reached$" "$work/run.log"; then
  # The machine slowed down after the fit: the time limit came first (still most of the steps).
  [ "$last" -lt "$fitted" ] && [ $((2 * last)) -ge "$fitted" ] || fail "stopped by time at step $last of $fitted"
else
  [ "$last" = "$fitted" ] || fail "the run ended at step $last, not at the fitted max_steps $fitted"
  grep -q "^step $fitted | .* | lr 0.000e+00 | " "$work/run.log" || fail "the rate is not 0 at the fitted last step"
fi

# A resume keeps the fitted max_steps (saved in the checkpoint), even with more time: it trains on
# from the earliest checkpoint kept to exactly the fitted step, where the rate is 0, and fits
# nothing again.
first=$(ls "$work/run"/checkpoint_0*.h5 | head -n 1)
mkdir -p "$work/resumed" && cp "$first" "$work/resumed/"
"$tessera" train $args --set output.dir="$work/resumed" --set train.max_minutes=10 --set train.fit_steps_to_time=true \
  --resume "$work/resumed/$(basename "$first")" > "$work/resumed.log" 2>&1 ||
  { cat "$work/resumed.log"; fail "the resume failed"; }
grep -q "^train: train.fit_steps_to_time:" "$work/resumed.log" && { cat "$work/resumed.log"; fail "the resume fitted again"; }
grep -q "^step $fitted | .* | lr 0.000e+00 | " "$work/resumed.log" &&
  grep -q "^train: saved .*model.h5 after $fitted steps" "$work/resumed.log" ||
  { cat "$work/resumed.log"; fail "the resume did not end at the saved max_steps $fitted with rate 0"; }

# Without a time limit there is nothing to fit to.
"$tessera" train $args --set output.dir="$work/no_limit" --set train.fit_steps_to_time=true > "$work/no_limit.log" 2>&1 &&
  fail "fit_steps_to_time without max_minutes was accepted"
grep -q "train.max_minutes" "$work/no_limit.log" && grep -q "train.fit_steps_to_time" "$work/no_limit.log" ||
  { cat "$work/no_limit.log"; fail "the refusal does not name both keys"; }
echo PASS
