#!/bin/sh
# The log line's throughput counts training only: a window with a validation (and the checkpoint
# it saves) in it reports about the tok/s of the others, not the validation's pause. Each
# validation here (beam 4 over 2,000 sentences) takes several times a window's training.
# Usage: log_windows.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$tessera" train --config "$config" --set output.dir="$work/run" --set train.max_steps=60 --set train.log_every=10 \
  --set train.valid_every=20 --set decode.beam=4 --set data.synthetic_valid_size=2000 --set checkpoint.every=0 > "$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "training failed"; }
grep -E '^(step|valid)' "$work/train.log" | cut -c1-110
# tokens_per_s of the windows that follow a validation (steps 30, 50) against the slowest of the
# others (10, 20, 40, 60).
sed -n 's/.*"step": \([0-9]*\),.*"tokens_per_s": \([-0-9.e+]*\),.*/\1 \2/p' "$work/run/metrics.jsonl" > "$work/tps.txt"
cat "$work/tps.txt"
[ "$(wc -l < "$work/tps.txt")" -eq 6 ] || fail "not 6 log windows in metrics.jsonl"
[ "$(grep -c '^valid [0-9]* .* | beam 4 | [0-9.]*s$' "$work/train.log")" -eq 3 ] || fail "not 3 validations in the log"
awk '$1 == 30 || $1 == 50 { after = (after == "" || $2 < after) ? $2 : after }
     $1 != 30 && $1 != 50 { plain = (plain == "" || $2 < plain) ? $2 : plain }
     END { printf "tok/s after a validation %.0f, slowest other window %.0f\n", after, plain; exit !(after >= 0.5 * plain) }' \
  "$work/tps.txt" || fail "a window's tok/s counted the validation's pause"

# A resume that validates its checkpoint's step first (train.valid_every changed): the first
# window after it counts training only too. Compared within the resumed process (the windows
# after its later, ordinary validations), so that load from other tests weighs on both alike.
# That window is also the process's first training (memory and threads still cold: about half
# the others' rate on a loaded 2-core machine), so the bound is 0.3: a validation counted in it
# (2.5 s and more here, against about 0.7 s of training) would bring it to about 0.2.
args="--config $config --set output.dir=$work/resumed --set train.max_steps=40 --set train.log_every=10 --set decode.beam=4 --set data.synthetic_valid_size=2000"
"$tessera" train $args --set train.valid_every=0 --set checkpoint.every=10 > "$work/first.log" 2>&1 ||
  { cat "$work/first.log"; fail "the run to resume failed"; }
"$tessera" train $args --set train.valid_every=10 --resume "$work/resumed/checkpoint_00000010.h5" > "$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; fail "the resume failed"; }
grep -q "^train: step 10 has not been validated" "$work/resume.log" || { cat "$work/resume.log"; fail "the resume did not validate step 10 first"; }
sed -n 's/.*"step": \([0-9]*\),.*"tokens_per_s": \([-0-9.e+]*\),.*/\1 \2/p' "$work/resumed/metrics.jsonl" | tail -n 3 > "$work/tps_resumed.txt"
cat "$work/tps_resumed.txt"
[ "$(cut -d' ' -f1 "$work/tps_resumed.txt" | tr '\n' ' ')" = "20 30 40 " ] || fail "not the resumed run's 3 log windows"
awk '$1 == 20 { after = $2 } $1 != 20 { plain = (plain == "" || $2 < plain) ? $2 : plain }
     END { printf "tok/s after the resume'"'"'s validation %.0f, slowest window after an ordinary one %.0f\n", after, plain; exit !(after >= 0.3 * plain) }' \
  "$work/tps_resumed.txt" || fail "the first window after a resume counted its validation's pause"
echo PASS
