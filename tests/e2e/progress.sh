#!/bin/sh
# Progress of long work on stderr: on a terminal (a pseudo-terminal made by script(1)) translate
# redraws done/total, rate and ETA; in a log (stderr a file) translate, score, vocab and average
# write one closing line each, as do train's vocabulary training and corpus encoding;
# TESSERA_PROGRESS=off writes none; under mpirun rank 0 alone writes it.
# Usage: progress.sh TESSERA CHECKPOINT CORPUS_DIR WORKDIR
set -eu
tessera=$1 checkpoint=$2 corpus=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset TESSERA_PROGRESS
awk 'BEGIN { for (i = 0; i < 200; i++) { n = 5 + (i * 7) % 16; s = ""; for (j = 0; j < n; j++) s = s (j ? " " : "") (i * 31 + j * 17) % 20; print s } }' > "$work/src.txt"

# A log: one line, at the end, naming the count.
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/out.txt" --batch 8 2> "$work/log.err"
[ "$(wc -l < "$work/log.err")" -eq 1 ] || { cat "$work/log.err"; fail "translate wrote other than one progress line to a log"; }
grep -q '^translate: 200 sentences in [0-9.]*s ([0-9.]* sentences/s)$' "$work/log.err" || { cat "$work/log.err"; fail "translate's log line"; }
grep -q "$(printf '\r')" "$work/log.err" && fail "a log got a terminal's carriage returns"
TESSERA_PROGRESS=off "$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/off.txt" 2> "$work/off.err"
[ -s "$work/off.err" ] && { cat "$work/off.err"; fail "TESSERA_PROGRESS=off still wrote progress"; }
cmp "$work/out.txt" "$work/off.txt" || fail "progress changed the translations"

# A terminal: redrawn lines with done/total and an ETA, then the closing line; the translations unchanged.
script -qec "'$tessera' translate --checkpoint '$checkpoint' -i '$work/src.txt' -o '$work/tty.txt' --batch 8" \
  /dev/null > "$work/tty.err" || fail "translate under script(1) failed"
grep -q 'translate: [0-9]*/200 sentences ([0-9]*%) | [0-9.]* sentences/s | ETA [0-9]*:[0-9][0-9]' "$work/tty.err" ||
  { cat -v "$work/tty.err"; fail "no redrawn progress with an ETA on a terminal"; }
grep -q 'translate: 200 sentences in' "$work/tty.err" || fail "no closing line on a terminal"
cmp "$work/out.txt" "$work/tty.txt" || fail "the terminal's run translated otherwise"

# Under mpirun: rank 0 alone.
mpirun -np 2 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/mpi.txt" \
  --batch 8 2> "$work/mpi.err" || { cat "$work/mpi.err"; fail "mpirun translate failed"; }
[ "$(grep -c '^translate: 200 sentences in' "$work/mpi.err")" -eq 1 ] || { cat "$work/mpi.err"; fail "not one progress line under mpirun"; }

# score --checkpoint, vocab and average: a closing line each.
"$tessera" score --checkpoint "$checkpoint" --src "$work/src.txt" --ref "$work/out.txt" 2> "$work/score.err" > /dev/null ||
  { cat "$work/score.err"; fail "score failed"; }
grep -q '^score: translate: 200 sentences in' "$work/score.err" || { cat "$work/score.err"; fail "score's line"; }
"$tessera" vocab --input "$corpus/multi30k_300.en" --model-prefix "$work/v" --vocab-size 200 > /dev/null \
  2> "$work/vocab.err" || { cat "$work/vocab.err"; fail "vocab failed"; }
grep -q '^vocab: read: 300 lines in' "$work/vocab.err" || { cat "$work/vocab.err"; fail "vocab's reading line"; }
grep -q '^vocab: train 200 pieces on 300 sentences: done in' "$work/vocab.err" || fail "vocab's training line"
cp "$checkpoint" "$work/copy.h5"
"$tessera" average "$checkpoint" "$work/copy.h5" -o "$work/avg.h5" > /dev/null 2> "$work/avg.err" ||
  { cat "$work/avg.err"; fail "average failed"; }
grep -q '^average: read: 2 checkpoints in' "$work/avg.err" || { cat "$work/avg.err"; fail "average's line"; }

# train: the corpus encoding's closing line (the vocabulary's too), on stderr, the log on stdout.
"$tessera" train --set data.train_src="$corpus/multi30k_300.en" --set data.train_tgt="$corpus/multi30k_300.de" \
  --set data.valid_src="$corpus/multi30k_300.en" --set data.valid_tgt="$corpus/multi30k_300.de" \
  --set data.vocab_size=200 --set model.layers=1 --set model.d_model=16 --set model.d_ff=32 --set model.heads=2 \
  --set train.max_steps=1 --set train.valid_every=0 --set train.valid_max_sentences=2 --set decode.max_extra_len=2 \
  --set output.dir="$work/run" > "$work/train.out" 2> "$work/train.err" || { cat "$work/train.err"; fail "train failed"; }
grep -q '^data: encode: [0-9]* pairs in [0-9.]*s' "$work/train.err" || { cat "$work/train.err"; fail "no encoding line"; }
grep -q '^vocab: train 200 pieces on' "$work/train.err" || { cat "$work/train.err"; fail "no vocabulary training line"; }
echo PASS
