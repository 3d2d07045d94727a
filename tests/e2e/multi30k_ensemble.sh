#!/bin/sh
# launch/multi30k_ensemble.sh (the Multi30k hour's recipe) on a tiny model and 4 steps: one shared
# vocabulary, two runs of different seeds, their averages, the ensemble's translation and its score.
# Usage: multi30k_ensemble.sh TESSERA SOURCE_DIR WORKDIR
set -eu
tessera=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
cd "$src"
TESSERA=$tessera OUT=$work/out PRECISION=fp32 TEST=val sh launch/multi30k_ensemble.sh --set model.layers=1 \
  --set model.d_model=32 --set model.d_ff=64 --set model.heads=2 --set train.max_steps=4 --set train.max_minutes=0 \
  --set train.fit_steps_to_time=false --set checkpoint.every=1 --set train.valid_every=0 --set decode.beam=2 \
  --set decode.max_extra_len=5 > "$work/run.log" 2>&1 || { cat "$work/run.log"; fail "the recipe failed"; }
grep -q "trained and averaged 2 models in" "$work/run.log" || { cat "$work/run.log"; fail "no summary line"; }
grep -q "^BLEU = " "$work/run.log" && grep -q "^chrF2 = " "$work/run.log" || { cat "$work/run.log"; fail "no scores"; }
[ "$(wc -l < "$work/out/val.de")" = 1014 ] || fail "the ensemble did not translate every line of val"
grep -q "seed: 2" "$work/out/seed2/config.yaml" || fail "the second run did not train with seed 2"
! cmp -s "$work/out/average1.h5" "$work/out/average2.h5" || fail "the two members are the same model"
echo PASS
