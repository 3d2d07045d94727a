#!/bin/sh
# train.recompute: layer against none, float32 with dropout on: the same loss and gradient norm at
# every step, bit for bit, post-norm and pre-norm, in one process and at tp=2 (the layers'
# all-reduces run again in backward) and tp=2 x dp=2 (the gradient buckets start from hooks that
# run during the recompute), with the same final weights; a checkpoint of a none run resumes
# with layer and goes on with the same losses; and a lower peak of host memory held by tensors
# (host_peak_bytes, counted by the allocator: the same every run).
# Usage: recompute.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$(dirname "$0")/same_losses.sh"
# 3 layers each side at 2048 tokens a batch: the activations outweigh the rest.
common="--config $config --set model.layers=3 --set model.dropout=0.1 --set train.batch_tokens=2048 --set train.max_steps=4 --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=0 --set checkpoint.keep_best=false --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=8"
peak() { sed -n 's/.*"host_peak_bytes": \([0-9]*\),.*/\1/p' "$1" | tail -n 1; }

for norm in post pre; do
  for recompute in none layer; do
    run "${norm}_$recompute" 1 --set model.norm=$norm --set train.recompute=$recompute --set checkpoint.every=2
    run "${norm}_${recompute}_tp2" 2 --set model.norm=$norm --set train.recompute=$recompute --set parallel.tensor=2
  done
  identical_losses "$work/${norm}_none/metrics.jsonl" "$work/${norm}_layer/metrics.jsonl"
  h5diff "$work/${norm}_none/model.h5" "$work/${norm}_layer/model.h5" /model /model > /dev/null ||
    fail "$norm-norm: the final weights differ"
  identical_losses "$work/${norm}_none_tp2/metrics.jsonl" "$work/${norm}_layer_tp2/metrics.jsonl"
  none=$(peak "$work/${norm}_none/metrics.jsonl") layer=$(peak "$work/${norm}_layer/metrics.jsonl")
  echo "$norm-norm host_peak_bytes: none $none, layer $layer"
  [ -n "$none" ] && [ -n "$layer" ] && [ "$layer" -lt "$none" ] || fail "$norm-norm: recompute's peak $layer is not below $none"
done
run pre_none_tp2_dp2 4 --set model.norm=pre --set parallel.tensor=2 --set parallel.data=2
run pre_layer_tp2_dp2 4 --set model.norm=pre --set parallel.tensor=2 --set parallel.data=2 --set train.recompute=layer
identical_losses "$work/pre_none_tp2_dp2/metrics.jsonl" "$work/pre_layer_tp2_dp2/metrics.jsonl"
# none's checkpoint of step 2 resumed with layer: steps 3 and 4 as none's.
run resume_with_layer 1 --set model.norm=pre --set train.recompute=layer --resume "$work/pre_none/checkpoint_00000002.h5"
grep -q "resumed from .* at step 2 " "$work/resume_with_layer.log" || fail "the resume did not start at step 2"
losses "$work/pre_none/metrics.jsonl" | awk '$1 > 2' > "$work/c.txt"
losses "$work/resume_with_layer/metrics.jsonl" | awk '$1 > 2' > "$work/d.txt"
[ "$(wc -l < "$work/c.txt")" -eq 2 ] && cmp -s "$work/c.txt" "$work/d.txt" || fail "the resume with layer differs from none"
echo PASS
