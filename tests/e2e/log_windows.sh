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
echo PASS
