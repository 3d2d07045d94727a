#!/bin/sh
# `tessera score --metrics loss ppl` (forced decoding of the references, label smoothing off) equals
# what training's validation logged for the same checkpoint and pairs: with label smoothing 0 the
# loss and the perplexity, with the default smoothing the perplexity; the same under mpirun; and
# loss without a checkpoint, with several, or with two references is refused.
# Usage: score_loss.sh TESSERA CORPUS_DIR WORKDIR
set -eu
tessera=$1 corpus=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
en=$corpus/multi30k_300.en de=$corpus/multi30k_300.de
sed -n 201,260p "$en" > "$work/valid.en"
sed -n 201,260p "$de" > "$work/valid.de"

# train RUN SMOOTHING: a short run whose last validation is of the weights in RUN/model.h5.
train() {
  "$tessera" train --set data.train_src="$en" --set data.train_tgt="$de" --set data.valid_src="$work/valid.en" \
    --set data.valid_tgt="$work/valid.de" --set data.vocab_size=300 --set model.layers=1 --set model.d_model=32 \
    --set model.d_ff=64 --set model.heads=2 --set train.max_steps=8 --set train.warmup=4 --set train.log_every=4 \
    --set train.batch_tokens=512 --set train.label_smoothing="$2" --set checkpoint.every=0 \
    --set decode.max_extra_len=3 --set output.dir="$1" > "$1.log" 2>&1 || { cat "$1.log"; fail "training $1 failed"; }
}
# logged RUN FIELD: the field of the run's last validation record, as metrics.jsonl holds it.
logged() { grep '"valid_loss"' "$1/metrics.jsonl" | tail -n 1 | sed 's/.*"'"$2"'": \([^,}]*\).*/\1/'; }
# scored RUN METRIC [LAUNCHER...]: the metric's score from score --json.
scored() {
  run=$1 metric=$2
  shift 2
  "$@" "$tessera" score --checkpoint "$run/model.h5" --src "$work/valid.en" --ref "$work/valid.de" \
    --metrics loss ppl --json > "$run.score" 2> "$run.score.err" || { cat "$run.score.err"; fail "score failed"; }
  grep "\"name\": \"$metric\"" "$run.score" | sed 's/.*"score": \([^,}]*\).*/\1/'
}

train "$work/plain" 0
[ -n "$(logged "$work/plain" valid_loss)" ] || fail "no validation logged"
[ "$(scored "$work/plain" loss)" = "$(logged "$work/plain" valid_loss)" ] ||
  fail "score loss $(scored "$work/plain" loss) != logged valid_loss $(logged "$work/plain" valid_loss)"
[ "$(scored "$work/plain" ppl)" = "$(logged "$work/plain" valid_ppl)" ] ||
  fail "score ppl $(scored "$work/plain" ppl) != logged valid_ppl $(logged "$work/plain" valid_ppl)"
echo "label smoothing 0: loss $(logged "$work/plain" valid_loss), ppl $(logged "$work/plain" valid_ppl), as logged"

train "$work/smoothed" 0.1
[ "$(scored "$work/smoothed" ppl)" = "$(logged "$work/smoothed" valid_ppl)" ] ||
  fail "score ppl $(scored "$work/smoothed" ppl) != logged valid_ppl $(logged "$work/smoothed" valid_ppl)"
[ "$(scored "$work/smoothed" loss)" != "$(logged "$work/smoothed" valid_loss)" ] ||
  fail "score's loss equals the label-smoothed validation loss: smoothing was not turned off"
[ "$(OMP_NUM_THREADS=1 scored "$work/smoothed" ppl mpirun -np 2 --oversubscribe)" = "$(logged "$work/smoothed" valid_ppl)" ] ||
  fail "score ppl under mpirun -np 2 differs from the logged valid_ppl"
echo "label smoothing 0.1: ppl as logged, also under mpirun -np 2"

# The plain-text lines, and the refusals.
"$tessera" score --checkpoint "$work/plain/model.h5" --src "$work/valid.en" --ref "$work/valid.de" -m ppl loss bleu \
  > "$work/text.out"
grep -q '^ppl = [0-9.]* ([0-9]* target tokens, label smoothing off)$' "$work/text.out" || { cat "$work/text.out"; fail "ppl line"; }
grep -q '^loss = [0-9.]* nats per target token' "$work/text.out" || fail "loss line"
grep -q '^BLEU = ' "$work/text.out" || fail "BLEU line after loss and ppl"
refused() {
  expected=$1
  shift
  if "$tessera" score "$@" > "$work/refused.out" 2>&1; then fail "score $* was not refused"; fi
  grep -q "$expected" "$work/refused.out" || { cat "$work/refused.out"; fail "score $*: no '$expected'"; }
}
refused "give --checkpoint and --src" --hyp "$work/valid.de" --ref "$work/valid.de" -m loss
refused "an ensemble has no single loss" --checkpoint "$work/plain/model.h5" --checkpoint "$work/plain/model.h5" \
  --src "$work/valid.en" --ref "$work/valid.de" -m loss
refused "take one --ref" --checkpoint "$work/plain/model.h5" --src "$work/valid.en" --ref "$work/valid.de" \
  --ref "$work/valid.de" -m ppl
head -n 5 "$work/valid.de" > "$work/short.de"
refused "has 5 lines" --checkpoint "$work/plain/model.h5" --src "$work/valid.en" --ref "$work/short.de" -m loss
echo PASS
