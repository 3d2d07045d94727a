#!/bin/sh
# A corpus run with one SentencePiece vocabulary per language: the source one trained on first use
# from the source side only, the target one given; embeddings of their own sizes; translate and
# score through both, also after the run folder moved and without the files (the checkpoint holds
# them; `vocab --from-checkpoint` writes them out); a resume after a vocabulary file was replaced and
# a --vocab that is not the run's are refused; the validation's BLEU and chrF2 equal `score`'s.
# Usage: per_language_vocab.sh TESSERA CORPUS_DIR WORKDIR
set -eu
tessera=$1 corpus=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
en=$corpus/multi30k_300.en de=$corpus/multi30k_300.de
head -n 20 "$en" > "$work/valid.en"
head -n 20 "$de" > "$work/valid.de"

"$tessera" vocab --input "$de" --model-prefix "$work/de250" --vocab-size 250 > /dev/null
"$tessera" train --set data.train_src="$en" --set data.train_tgt="$de" --set data.valid_src="$work/valid.en" \
  --set data.valid_tgt="$work/valid.de" --set data.joint_vocab=false --set model.share_embeddings=false \
  --set data.vocab_size=300 --set data.vocab_tgt="$work/de250.model" --set model.layers=1 --set model.d_model=32 \
  --set model.d_ff=64 --set model.heads=2 --set train.max_steps=6 --set train.warmup=3 --set train.log_every=3 \
  --set train.batch_tokens=1024 --set checkpoint.every=0 --set decode.max_extra_len=5 \
  --set output.dir="$work/run" > "$work/train.log"
grep -q "data: trained a source bpe vocabulary of 300 entries into $work/run/vocab.src.model" "$work/train.log" ||
  { cat "$work/train.log"; fail "the source vocabulary was not trained into the run folder"; }
grep -q "data: target vocabulary $work/de250.model (250 entries)" "$work/train.log" ||
  { cat "$work/train.log"; fail "the given target vocabulary was not used"; }
# The source vocabulary saw English only: no German letter in it (the German one has them).
grep -q "ß" "$work/de250.vocab" || fail "the German vocabulary has no ß: the check below proves nothing"
grep -q "ß" "$work/run/vocab.src.vocab" && fail "the source vocabulary was trained on German text too"

# The end-of-run validation (the final weights, the same decoding) scores what `score` scores:
# BLEU and chrF2 to the last digit (a run long enough to translate more than nothing).
"$tessera" train --config "$work/run/config.yaml" --set output.dir="$work/scored" --set train.max_steps=40 \
  --set train.warmup=10 --set train.log_every=40 > "$work/scored.log" 2>&1 || { cat "$work/scored.log"; fail "the scored run failed"; }
"$tessera" score --checkpoint "$work/scored/model.h5" --src "$work/valid.en" --ref "$work/valid.de" -m bleu chrf --json \
  > "$work/score.json"
grep -q '"hyp_len": 0,' "$work/score.json" && fail "the scored run translates nothing: the check below proves little"
for m in bleu chrf; do
  logged=$(sed -n "s/.*\"valid_$m\": \([-0-9.e+]*\),.*/\1/p" "$work/scored/metrics.jsonl" | tail -n 1)
  scored=$(grep -i "\"name\": \"$m" "$work/score.json" | sed -n 's/.*"score": \([-0-9.e+]*\),.*/\1/p')
  [ -n "$logged" ] && [ "$logged" = "$scored" ] ||
    { cat "$work/score.json"; tail -n 2 "$work/scored/metrics.jsonl"; fail "valid_$m $logged is not score's $scored"; }
done
h5ls -r "$work/run/model.h5" > "$work/h5ls.txt"
grep -q '^/model/encoder\.embed_tokens\.weight  *Dataset {300, 32}$' "$work/h5ls.txt" &&
  grep -q '^/model/decoder\.embed_tokens\.weight  *Dataset {250, 32}$' "$work/h5ls.txt" ||
  { cat "$work/h5ls.txt"; fail "the embeddings do not have the two vocabularies' sizes"; }

# The checkpoint holds both vocabularies (/vocab/src, /vocab/tgt).
grep -q '^/vocab/src  *Dataset {[0-9]*}$' "$work/h5ls.txt" && grep -q '^/vocab/tgt  *Dataset {[0-9]*}$' "$work/h5ls.txt" ||
  { cat "$work/h5ls.txt"; fail "the checkpoint does not hold the two vocabularies"; }

# Resuming after the source vocabulary file was replaced (here: by the German one) would go on with
# other token ids: refused, naming the file.
ls "$work/run"/checkpoint_*.h5 > /dev/null || fail "the run wrote no step checkpoint to resume from"
cp "$work/run/vocab.src.model" "$work/vocab.src.saved"
cp "$work/de250.model" "$work/run/vocab.src.model"
status=0
"$tessera" train --config "$work/run/config.yaml" --set train.max_steps=8 --resume > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "vocabulary '$work/run/vocab.src.model' is not the one it was trained with (stored in it as /vocab/src)" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "a replaced vocabulary was not refused on resume (status $status)"; }
grep -q "training pairs kept" "$work/err.txt" && fail "the corpus was encoded before the resume was refused"
# Resuming as a joint-vocabulary run is refused before any vocabulary is trained into the folder.
status=0
"$tessera" train --config "$work/run/config.yaml" --set data.joint_vocab=true --set model.share_embeddings=true \
  --set data.vocab_tgt= --set train.max_steps=8 --resume > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "it was trained with one vocabulary per language, the config now gives one joint vocabulary" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "a resume as a joint-vocabulary run was not refused (status $status)"; }
[ -e "$work/run/vocab.model" ] && fail "a joint vocabulary was trained before the resume was refused"
# Gone instead (a run folder copied without it): written back from the checkpoint, not trained anew.
rm "$work/run/vocab.src.model"
"$tessera" train --config "$work/run/config.yaml" --set train.max_steps=8 --set data.vocab_size=310 --resume \
  > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "resume without the vocabulary file"; }
# A changed data.vocab_size does not retrain the run's vocabulary; the log says so.
grep -q "data: note: $work/run/vocab.src.model was trained with 300 entries and is kept, although data.vocab_size is now 310" \
  "$work/resume.log" || { cat "$work/resume.log"; fail "no note that the vocabulary keeps its size"; }
grep -q "data: restored vocabulary $work/run/vocab.src.model from $work/run/checkpoint_00000006.h5:/vocab/src" \
  "$work/resume.log" || { cat "$work/resume.log"; fail "the vocabulary was not restored from the checkpoint"; }
cmp "$work/run/vocab.src.model" "$work/vocab.src.saved" || fail "another vocabulary was restored"
# A given vocabulary moved away since (on a copy of the run): refused by key, saying that the
# checkpoint holds it, and the way it names works: the checkpoint's written into the run folder.
cp -r "$work/run" "$work/copy" && mv "$work/de250.model" "$work/de250.moved"
status=0
"$tessera" train --config "$work/copy/config.yaml" --set output.dir="$work/copy" --set train.max_steps=9 --resume \
  > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "data.vocab_tgt = '$work/de250.model' does not exist; the checkpoint '$work/copy/checkpoint_[0-9]*.h5' holds the run's vocabulary: --set data.vocab_tgt= (empty) writes it into output.dir" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "a moved data.vocab_tgt on resume was not refused with the way on (status $status)"; }
"$tessera" train --config "$work/copy/config.yaml" --set output.dir="$work/copy" --set train.max_steps=9 --resume \
  --set data.vocab_tgt= > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "resume with data.vocab_tgt emptied"; }
grep -q "data: restored vocabulary $work/copy/vocab.tgt.model from $work/copy/checkpoint_[0-9]*.h5:/vocab/tgt" "$work/resume.log" &&
  cmp "$work/copy/vocab.tgt.model" "$work/de250.moved" || { cat "$work/resume.log"; fail "the target vocabulary was not restored"; }
mv "$work/de250.moved" "$work/de250.model" && rm -r "$work/copy"

# Move the run folder and translate.
mv "$work/run" "$work/moved"
"$tessera" translate --checkpoint "$work/moved/model.h5" -i "$work/valid.en" > "$work/hyp.de"
[ "$(wc -l < "$work/hyp.de")" -eq 20 ] || fail "translate wrote $(wc -l < "$work/hyp.de") lines for 20"
"$tessera" score --checkpoint "$work/moved/model.h5" --src "$work/valid.en" --ref "$work/valid.de" |
  grep -q '^BLEU = ' || fail "score --checkpoint"
# Without any vocabulary file, and with another vocabulary where the run's config says (a new run
# in the old folder): the checkpoint's own are used, the same translations.
mkdir -p "$work/aside" && mv "$work/moved/vocab.src.model" "$work/de250.model" "$work/aside/"
mkdir -p "$work/run"
"$tessera" vocab --input "$de" --model-prefix "$work/run/vocab.src" --vocab-size 300 > /dev/null
"$tessera" translate --checkpoint "$work/moved/model.h5" -i "$work/valid.en" > "$work/hyp2.de" ||
  fail "translate without the vocabulary files"
cmp "$work/hyp.de" "$work/hyp2.de" || fail "other translations without the vocabulary files"
# `tessera vocab --from-checkpoint` writes them out, the same bytes as the run's files.
mkdir -p "$work/out" && echo mine > "$work/out/v.src.model.tmp"  # a file of that name is not its temporary
"$tessera" vocab --from-checkpoint "$work/moved/model.h5" --model-prefix "$work/out/v" > /dev/null ||
  fail "vocab --from-checkpoint"
[ "$(cat "$work/out/v.src.model.tmp")" = mine ] || fail "vocab --from-checkpoint replaced v.src.model.tmp"
status=0
"$tessera" vocab --from-checkpoint "$work/moved/model.h5" --model-prefix "$work/out/v.src.model.tmp/w" > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "vocab: cannot write '$work/out/v.src.model.tmp/w.src.model': '$work/out/v.src.model.tmp' is not a folder" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "an output under a file was not refused before writing (status $status)"; }
cmp "$work/out/v.src.model" "$work/aside/vocab.src.model" && cmp "$work/out/v.tgt.model" "$work/aside/de250.model" ||
  fail "vocab --from-checkpoint wrote other vocabularies than the run's"
# ... never over the checkpoint itself (here named as the target side's output), which stays as it was.
cp "$work/moved/model.h5" "$work/out/c.tgt.model"
status=0
"$tessera" vocab --from-checkpoint "$work/out/c.tgt.model" --model-prefix "$work/out/c" > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "vocab: the output '$work/out/c.tgt.model' is the checkpoint '$work/out/c.tgt.model'" "$work/err.txt" \
  && cmp "$work/moved/model.h5" "$work/out/c.tgt.model" && [ ! -e "$work/out/c.src.model" ] ||
  { cat "$work/err.txt"; fail "vocab --from-checkpoint wrote over the checkpoint (status $status)"; }
# A vocabulary named on the command line must be the checkpoint's own.
status=0
"$tessera" translate --checkpoint "$work/moved/model.h5" --vocab "$work/run/vocab.src.model" -i "$work/valid.en" \
  > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "\-\-vocab '$work/run/vocab.src.model' is not the vocabulary checkpoint '$work/moved/model.h5' holds" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "another --vocab was not refused by name (status $status)"; }
"$tessera" translate --checkpoint "$work/moved/model.h5" --vocab "$work/aside/vocab.src.model" \
  --vocab-tgt "$work/aside/de250.model" -i "$work/valid.en" > "$work/hyp3.de" || fail "translate with its own --vocab"
cmp "$work/hyp.de" "$work/hyp3.de" || fail "other translations with the run's own vocabularies named"
status=0
"$tessera" translate --checkpoint "$work/moved/model.h5" --vocab-tgt "$work/aside/vocab.src.model" \
  -i "$work/valid.en" > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "\-\-vocab-tgt '$work/aside/vocab.src.model' is not the vocabulary" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "a wrong --vocab-tgt was not refused by name (status $status)"; }
# An ensemble of this translation model and a synthetic task's is refused, naming both tasks.
"$tessera" train --set data.task=reverse --set model.layers=1 --set model.d_model=32 --set model.d_ff=64 \
  --set model.heads=2 --set data.synthetic_train_size=10 --set data.synthetic_valid_size=2 --set train.max_steps=1 \
  --set output.dir="$work/reverse" > "$work/reverse.log" 2>&1 || { cat "$work/reverse.log"; fail "training the reverse model"; }
status=0
"$tessera" translate --checkpoint "$work/moved/model.h5" "$work/reverse/model.h5" -i "$work/valid.en" -o "$work/ens.de" \
  > "$work/err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "ensemble: checkpoint '$work/reverse/model.h5' is a 'reverse' task's, '$work/moved/model.h5' a 'translation' task's" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "an ensemble of a translation and a synthetic model was not refused (status $status)"; }
[ -e "$work/ens.de" ] && fail "the refused ensemble wrote an output"
echo PASS
