#!/bin/sh
# launch/plot.py draws a PNG from a tiny synthetic metrics.jsonl (two runs, one resumed), and
# refuses a folder without metrics.jsonl. Exit 77 (ctest: skipped) when matplotlib is missing.
# Usage: plot_test.sh SOURCE_DIR WORKDIR
set -eu
src=$1 work=$2
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  echo "SKIP: matplotlib is not installed (python3 -m pip install matplotlib)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/run_a" "$work/run_b" "$work/empty"
for run in run_a run_b; do
  awk 'BEGIN { for (s = 10; s <= 40; s += 10) {
    printf "{\"step\": %d, \"epoch\": 1, \"loss\": %.4f, \"ppl\": 1.0, \"lr\": %.6f, \"grad_norm\": 1.0, \"tokens_per_s\": 100, \"elapsed_s\": %d, \"eta_s\": 0}\n", s, 10 / s, s / 10000, s
    if (s % 20 == 0) printf "{\"step\": %d, \"valid_loss\": %.4f, \"valid_ppl\": 1.0, \"valid_bleu\": %d, \"valid_chrf\": 1.0, \"valid_accuracy\": null, \"valid_seconds\": 1.0}\n", s, 12 / s, s
  } }' > "$work/$run/metrics.jsonl"
done
printf '{"resumed_from": "x/checkpoint_00000020.h5", "step": 20}\n{"step": 30, "epoch": 1, "loss": 0.2, "ppl": 1.0, "lr": 0.003, "grad_norm": 1.0, "tokens_per_s": 100, "elapsed_s": 31, "eta_s": 0}\n' >> "$work/run_b/metrics.jsonl"
python3 "$src/launch/plot.py" "$work/run_a" "$work/run_b" -o "$work/curves.png"
[ "$(head -c 4 "$work/curves.png" | od -An -c | tr -d ' ')" = "211PNG" ] || { echo "FAIL: no PNG written"; exit 1; }
if python3 "$src/launch/plot.py" "$work/empty" -o "$work/none.png" 2> "$work/err.txt"; then
  echo "FAIL: a folder without metrics.jsonl was accepted"; exit 1
fi
grep -q "no metrics.jsonl" "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: wrong error"; exit 1; }
echo PASS
