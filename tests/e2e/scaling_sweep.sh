#!/bin/sh
# launch/scaling_sweep.py on a tiny synthetic model: one run per layout (and, for data-parallel
# layouts, the measured all-reduce wait with and without overlap), a CSV whose speed-up and
# efficiency follow from its own tokens/s, and its figure (launch/plot.py --sweep); a malformed layout is refused.
# Usage: scaling_sweep.sh PYTHON TESSERA SOURCE_DIR WORKDIR
set -eu
python=$1 tessera=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$python" "$src/launch/scaling_sweep.py" --tessera "$tessera" --config "$src/configs/reverse.yaml" \
  --layouts 1x1 2x1 1x2 --steps 6 --log-every 2 --set model.layers=1 --set model.d_model=32 --set model.d_ff=64 \
  --set model.heads=2 --set data.synthetic_train_size=400 --set data.synthetic_valid_size=2 --out "$work/sweep" \
  > "$work/sweep.log" 2>&1 || { cat "$work/sweep.log"; fail "the sweep failed"; }
tr -d '\r' < "$work/sweep/scaling.csv" > "$work/scaling.csv"  # Python's csv ends rows with \r\n
csv=$work/scaling.csv
[ "$(head -n 1 "$csv")" = "layout,processes,tensor,data,tokens_per_s,allreduce_wait_ms,allreduce_serial_ms,hidden_share,speedup,efficiency,baseline" ] ||
  { cat "$csv"; fail "unexpected CSV header"; }
[ "$(sed 1d "$csv" | cut -d, -f1 | tr '\n' ' ')" = "1x1 2x1 1x2 " ] || { cat "$csv"; fail "not one row per layout, in order"; }
# Speed-up and efficiency against 1x1; the all-reduce columns only for the data-parallel layout.
awk -F, 'NR == 2 { base = $5 }
  NR > 1 { bad = 0
    if (!($5 > 0)) bad = 1
    if ($9 - $5 / base > 1e-9 || $5 / base - $9 > 1e-9) bad = 1
    if ($10 - $9 / $2 > 1e-9 || $9 / $2 - $10 > 1e-9) bad = 1
    if ($11 != "1x1") bad = 1
    if (($4 > 1) != ($6 != "" && $7 != "" && $8 != "")) bad = 1
    if (bad) { print "wrong row: " $0; failed = 1 } }
  END { exit failed }' "$csv" || { cat "$csv"; fail "speed-up, efficiency or all-reduce columns do not follow"; }
grep -q '^ *1x2 .* all-reduce hidden [0-9]*%$' "$work/sweep.log" || { cat "$work/sweep.log"; fail "no summary line for 1x2"; }
# The figure, drawn by plot.py --sweep where matplotlib is installed (the docs tests need it anyway).
if python3 -c 'import matplotlib' 2>/dev/null; then
  [ "$(head -c 4 "$work/sweep/scaling.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "no scaling.png written"
  "$python" "$src/launch/plot.py" --sweep "$work/sweep/scaling.csv" "$work/sweep/scaling.csv" -o "$work/two.svg" \
    > /dev/null || fail "plot.py --sweep of two CSVs failed"
  grep -q '<svg' "$work/two.svg" || fail "plot.py --sweep wrote no SVG"
fi
# 1x2 ran three times: overlapped, and measured with and without overlap.
[ -d "$work/sweep/tp1_dp2_overlap_measured" ] && [ -d "$work/sweep/tp1_dp2_serial_measured" ] ||
  fail "the data-parallel layout's all-reduce was not measured both ways"
status=0
"$python" "$src/launch/scaling_sweep.py" --tessera "$tessera" --layouts 2y1 --out "$work/bad" > "$work/bad.log" 2>&1 ||
  status=$?
[ $status -eq 2 ] && grep -q "'2y1' is not a layout TPxDP" "$work/bad.log" || { cat "$work/bad.log"; fail "a bad layout was not refused"; }
# A layout that fails (2 heads over 3 tensor-parallel ranks) is named and left out; the others are
# written, and the sweep exits 1.
status=0
"$python" "$src/launch/scaling_sweep.py" --tessera "$tessera" --config "$src/configs/reverse.yaml" \
  --layouts 1x1 3x1 --steps 2 --log-every 1 --set model.layers=1 --set model.d_model=32 --set model.d_ff=64 \
  --set model.heads=2 --set data.synthetic_train_size=100 --set data.synthetic_valid_size=2 --out "$work/partial" \
  > "$work/partial.log" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q '^scaling_sweep: layout 3x1 failed (exit status [0-9]*); left out$' "$work/partial.log" &&
  grep -q '^scaling_sweep: 1 layout(s) failed and are not in them: 3x1$' "$work/partial.log" ||
  { cat "$work/partial.log"; fail "a failed layout was not named (status $status)"; }
grep -q Traceback "$work/partial.log" && fail "a failed layout ended in a traceback"
[ "$(tr -d '\r' < "$work/partial/scaling.csv" | sed 1d | cut -d, -f1)" = "1x1" ] || fail "the finished layout was not written"
status=0
"$python" "$src/launch/scaling_sweep.py" --tessera "$tessera" --steps 0 --out "$work/bad" > "$work/bad.log" 2>&1 ||
  status=$?
[ $status -eq 2 ] && grep -q -- "'0' is not a positive whole number" "$work/bad.log" || { cat "$work/bad.log"; fail "--steps 0 was not refused"; }
echo PASS
