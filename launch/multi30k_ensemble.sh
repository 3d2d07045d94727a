#!/bin/sh
# The Multi30k hour on 2 cores as an ensemble: one joint vocabulary, then MEMBERS single-thread runs
# of configs/multi30k.yaml side by side (one per core, seeds 1, 2, ...), each run's last 5 checkpoints
# averaged, and the test set translated by the ensemble of the averages and scored.
#   sh launch/multi30k_ensemble.sh [--set key=value ...]
# Environment: TESSERA (build/tessera), OUT (checkpoints/multi30k_ensemble), MEMBERS (2),
# PRECISION (bf16: bfloat16 GEMMs, which need AMX or AVX512-BF16; fp32 elsewhere), DATA
# (configs/data/multi30k), TEST (test_2016_flickr). Extra --set options go to every run.
set -eu
tessera=${TESSERA:-build/tessera}
out=${OUT:-checkpoints/multi30k_ensemble}
members=${MEMBERS:-2}
precision=${PRECISION:-bf16}
data=${DATA:-configs/data/multi30k}
test_set=${TEST:-test_2016_flickr}
mkdir -p "$out"
start=$(date +%s)
# One vocabulary for every member: an ensemble's models must share it (translate checks).
"$tessera" vocab --model-prefix "$out/vocab" --input "$data/train.en.gz" --input "$data/train.de.gz" > "$out/vocab.log"
pids=""
for seed in $(seq 1 "$members"); do
  OMP_NUM_THREADS=1 "$tessera" train --config configs/multi30k.yaml --set train.precision="$precision" \
    --set train.seed="$seed" --set data.vocab="$out/vocab.model" --set output.dir="$out/seed$seed" "$@" \
    > "$out/train$seed.log" 2>&1 &
  pids="$pids $!"
done
failed=0
for pid in $pids; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || { tail -n 5 "$out"/train*.log; echo "multi30k_ensemble: a run failed (logs: $out/train*.log)"; exit 1; }
averages=""
for seed in $(seq 1 "$members"); do
  # shellcheck disable=SC2046  # the checkpoint names have no spaces: tessera writes them
  "$tessera" average $(ls "$out/seed$seed"/checkpoint_0*.h5 | tail -n 5) -o "$out/average$seed.h5" > /dev/null
  averages="$averages $out/average$seed.h5"
done
echo "multi30k_ensemble: trained and averaged $members models in $(($(date +%s) - start)) s"
# shellcheck disable=SC2086  # one argument per checkpoint
OMP_NUM_THREADS=2 "$tessera" translate --checkpoint $averages -i "$data/$test_set.en.gz" -o "$out/$test_set.de"
gunzip -c "$data/$test_set.de.gz" > "$out/$test_set.ref.de"
"$tessera" score --ref "$out/$test_set.ref.de" --hyp "$out/$test_set.de" -m bleu chrf
