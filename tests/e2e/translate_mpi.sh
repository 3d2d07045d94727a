#!/bin/sh
# `tessera translate` under mpirun: the ranks share the batches and rank 0 writes every
# translation, the same file as one process writes; standard input (which mpirun gives rank 0
# only), a missing checkpoint, and sentences or weights that differ between the ranks are refused
# with one message; a rank that hangs ends the job after --timeout; --nbest lists, ensembles and --sample draws, the
# same under mpirun. `tessera score` under mpirun: one score, the same as one process's (with --checkpoint the ranks
# share the translation).
# Usage: translate_mpi.sh TESSERA CHECKPOINT WORKDIR
set -eu
tessera=$1 checkpoint=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 41 sequences of 5 to 20 symbols (a fixed pseudo-random pattern).
awk 'BEGIN { for (i = 0; i < 41; i++) { n = 5 + (i * 7) % 16; s = ""; for (j = 0; j < n; j++) s = s (j ? " " : "") (i * 31 + j * 17) % 20; print s } }' > "$work/src.txt"

"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/one.txt" --batch 4
mpirun -np 3 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/three.txt" \
  --batch 4 > "$work/three.log" 2>&1 || { cat "$work/three.log"; fail "mpirun -np 3 translate failed"; }
[ "$(wc -l < "$work/three.txt")" -eq 41 ] || fail "not 41 translations"
cmp "$work/one.txt" "$work/three.txt" || fail "3 ranks translated otherwise than one process"
# In buffers of 5 lines (the ranks share each buffer's batches), as one process translates them.
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/one_buffered.txt" --batch 2 --buffer 5
mpirun -np 3 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" \
  -o "$work/three_buffered.txt" --batch 2 --buffer 5 > "$work/buffered.log" 2>&1 || { cat "$work/buffered.log"; fail "mpirun --buffer 5 failed"; }
cmp "$work/one_buffered.txt" "$work/three_buffered.txt" || fail "3 ranks translated buffers otherwise than one process"

# --nbest: 3 hypotheses a line, best first; the first is the translation, the same under mpirun.
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/beam4.txt" --batch 4 --beam 4
printf '\n' >> "$work/src.txt"  # a blank line: one empty hypothesis scored 0
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/nbest_one.txt" --batch 4 --beam 4 --nbest 3
mpirun -np 3 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" \
  -o "$work/nbest_three.txt" --batch 4 --beam 4 --nbest 3 > "$work/nbest.log" 2>&1 || { cat "$work/nbest.log"; fail "mpirun --nbest failed"; }
cmp "$work/nbest_one.txt" "$work/nbest_three.txt" || fail "3 ranks wrote another n-best list than one process"
awk -F' [|][|][|] ' '
  NF != 4 || $3 !~ /^F0= -?[0-9]+[.][0-9]+$/ { print "malformed: " $0; bad = 1 }
  $1 == prev && $4 + 0 > last + 0 { print "not best first: " $0; bad = 1 }
  { count[$1]++; prev = $1; last = $4 }
  END { for (i = 0; i < 41; i++) if (count[i] != 3) { print "line " i ": " count[i] " hypotheses"; bad = 1 }
        if (count[41] != 1) { print "blank line: " count[41] " hypotheses"; bad = 1 }
        exit bad }' "$work/nbest_one.txt" || fail "--nbest output is not 3 hypotheses a line, best first"
grep -qx '41 |||  ||| F0= 0.000000 ||| 0.000000' "$work/nbest_one.txt" || fail "the blank line's hypothesis is not empty and 0"
awk -F' [|][|][|] ' '!seen[$1]++ && $1 < 41 { print $2 }' "$work/nbest_one.txt" | cmp - "$work/beam4.txt" \
  || fail "the first of the n best is not the translation"
sed -i '$d' "$work/src.txt"
# Whole numbers are read in decimal, as in a config ("010" was octal 8), a sign allowed, and hex is refused.
status=0
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" --beam +9 --nbest 010 > "$work/octal.log" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q -- "--nbest 10 is more than the beam size 9" "$work/octal.log" \
  || { cat "$work/octal.log"; fail "--nbest 010 was not read as 10"; }
status=0
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" --beam 0x10 > "$work/hex.log" 2>&1 || status=$?
[ $status -ne 0 ] && grep -q "'0x10' is not a whole number in \[1, 1000\]" "$work/hex.log" \
  || { cat "$work/hex.log"; fail "--beam 0x10 was not refused"; }

status=0
mpirun -np 2 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" < "$work/src.txt" > "$work/stdin.log" 2>&1 \
  || status=$?
[ $status -ne 0 ] || fail "standard input under mpirun was accepted"
[ "$(grep -c 'give the sentences with -i FILE' "$work/stdin.log")" -eq 1 ] || { cat "$work/stdin.log"; fail "stdin: not one message"; }

status=0
mpirun -np 2 --oversubscribe "$tessera" translate --checkpoint "$work/no_such.h5" -i "$work/src.txt" > "$work/missing.log" 2>&1 \
  || status=$?
[ $status -ne 0 ] || fail "a missing checkpoint was accepted"
[ "$(grep -c "checkpoint '$work/no_such.h5' does not exist" "$work/missing.log")" -eq 1 ] \
  || { cat "$work/missing.log"; fail "missing checkpoint: not one message"; }
# Errors rank 0 meets while loading end the job (no rank left waiting), printed once: a vocabulary
# given for a synthetic task's model, an output that cannot be written, a line that is not the
# model's input, a GPU.
once() {  # once NAME PATTERN ARGS...: exits non-zero within 60 s, PATTERN printed once
  name=$1 pattern=$2 && shift 2
  status=0
  timeout 60 mpirun -np 2 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" "$@" > "$work/$name.log" 2>&1 \
    || status=$?
  [ $status -ne 0 ] && [ $status -ne 124 ] || { cat "$work/$name.log"; fail "$name: exit status $status"; }
  [ "$(grep -c "$pattern" "$work/$name.log")" -eq 1 ] || { cat "$work/$name.log"; fail "$name: not one message"; }
}
once bad_vocab "no vocabulary (leave --vocab out)" -i "$work/src.txt" --vocab "[bad"
once nbest_beam "translate: --nbest 3 is more than the beam size 1 (decode.beam of the checkpoint's config)" \
  -i "$work/src.txt" --nbest 3
once bad_output "cannot write '$work/no_such_dir/out.txt': folder" -i "$work/src.txt" -o "$work/no_such_dir/out.txt"
printf '3 x 4\n' > "$work/bad.txt"
once bad_line "'x' is not a symbol number" -i "$work/bad.txt"
once gpu "none answers on this machine\|has no CUDA support\|head sizes 32, 64 or 128" -i "$work/src.txt" --device cuda
# A rank that hangs while decoding (TESSERA_FAULT_DECODE_HANG=RANK: it sleeps) ends the job after
# --timeout, the rank waiting for it naming the wait once; a file output is not written, and its
# temporary is removed (the watchdog ends the process without unwinding).
hung() {  # hung NAME RANK COMMAND ARGS...: exits non-zero within 60 s, rank RANK's wait named once
  name=$1 rank=$2 && shift 2
  status=0
  TESSERA_FAULT_DECODE_HANG=$rank timeout 60 mpirun -np 2 --oversubscribe "$tessera" "$@" --timeout 3 \
    > "$work/$name.log" 2>&1 || status=$?
  [ $status -ne 0 ] && [ $status -ne 124 ] || { cat "$work/$name.log"; fail "$name: exit status $status"; }
  [ "$(grep -c "error on rank $((1 - rank)): all_gather has waited [0-9]* s (--timeout = 3): another rank has died or hangs" \
    "$work/$name.log")" -eq 1 ] || { cat "$work/$name.log"; fail "$name: the wait not named once"; }
}
mkdir "$work/hung"
hung hung_translate 1 translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/hung/out.txt" --batch 4
[ -z "$(ls -A "$work/hung")" ] || fail "a hung rank's translation left files: $(ls "$work/hung")"
hung hung_translate_rank_0 0 translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/hung/out.txt" --batch 4
[ -z "$(ls -A "$work/hung")" ] || fail "a hung rank 0's translation left files: $(ls "$work/hung")"
# An output FIFO read from later than --timeout: rank 0 waits for its reader, and the others for rank
# 0, without the timeout (they are not hung). The timeout also bounds the ranks' other waits (their
# skew at the start, each buffer's gather), so it is not cut closer than a loaded machine can keep.
mkfifo "$work/out.fifo"
(status=0 && timeout 60 mpirun -np 2 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" \
  -i "$work/src.txt" -o "$work/out.fifo" --batch 4 --timeout 4 > "$work/fifo.log" 2>&1 || status=$?
  echo $status > "$work/fifo.status") &
sleep 8
timeout 60 cat "$work/out.fifo" > "$work/fifo.txt" || true
wait
[ "$(cat "$work/fifo.status")" -eq 0 ] || { cat "$work/fifo.log"; fail "an output FIFO read from 8 s late: status $(cat "$work/fifo.status")"; }
cmp "$work/one.txt" "$work/fifo.txt" || fail "the FIFO's reader got another translation"

# --sample: the draws follow the seed and the sentence, not the batch or the rank; top-k 1 is
# greedy; another seed draws otherwise; --beam and --nbest do not go with it.
sample="--sample --seed 5 --temperature 2"
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_b1.txt" --batch 1 $sample
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_b5.txt" --batch 5 $sample
cmp "$work/sample_b1.txt" "$work/sample_b5.txt" || fail "--sample drew otherwise in batches of 1 and of 5"
mpirun -np 3 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_three.txt" \
  --batch 4 $sample > "$work/sample.log" 2>&1 || { cat "$work/sample.log"; fail "mpirun --sample failed"; }
cmp "$work/sample_b1.txt" "$work/sample_three.txt" || fail "--sample drew otherwise on 3 ranks"
cmp -s "$work/sample_b1.txt" "$work/one.txt" && fail "--sample at temperature 2 drew exactly the greedy translations"
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_seed6.txt" --batch 4 --sample --seed 6 --temperature 2
cmp -s "$work/sample_b1.txt" "$work/sample_seed6.txt" && fail "--seed 6 drew the same as --seed 5"
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_seed05.txt" --batch 4 --sample --seed 05 --temperature 2
cmp "$work/sample_b1.txt" "$work/sample_seed05.txt" || fail "--seed 05 is not --seed 5"
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_seed010.txt" --batch 4 --sample --seed 010 --temperature 2
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_seed8.txt" --batch 4 --sample --seed 8 --temperature 2
cmp -s "$work/sample_seed010.txt" "$work/sample_seed8.txt" && fail "--seed 010 was read as octal (8)"
"$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/sample_top1.txt" --batch 4 --sample --top-k 1
cmp "$work/one.txt" "$work/sample_top1.txt" || fail "--sample --top-k 1 is not greedy decoding"
for bad in "--sample --beam 4" "--sample --nbest 1" "--sample --length-penalty 1" "--top-k 3" "--sample --seed -1" \
  "--sample --seed 9223372036854775808"; do
  status=0
  "$tessera" translate --checkpoint "$checkpoint" -i "$work/src.txt" $bad > "$work/sample_bad.log" 2>&1 || status=$?
  [ $status -ge 100 ] && grep -Eq "excludes|requires|not a whole number" "$work/sample_bad.log" || { cat "$work/sample_bad.log"; fail "'$bad' was not refused"; }
done

# An ensemble (--checkpoint A B): the same under mpirun; a model with itself translates as alone;
# a model of other symbols is refused once; score --checkpoint A B scores the ensemble's output.
earlier=$(ls "$(dirname "$checkpoint")"/checkpoint_0*.h5 | head -n 1)
"$tessera" translate --checkpoint "$checkpoint" "$earlier" -i "$work/src.txt" -o "$work/ens_one.txt" --batch 4 --beam 3
mpirun -np 3 --oversubscribe "$tessera" translate --checkpoint "$checkpoint" "$earlier" -i "$work/src.txt" \
  -o "$work/ens_three.txt" --batch 4 --beam 3 > "$work/ens.log" 2>&1 || { cat "$work/ens.log"; fail "mpirun ensemble failed"; }
[ "$(wc -l < "$work/ens_one.txt")" -eq 41 ] || fail "the ensemble did not write 41 translations"
cmp "$work/ens_one.txt" "$work/ens_three.txt" || fail "3 ranks translated otherwise than one process with the ensemble"
"$tessera" translate --checkpoint "$checkpoint" --checkpoint "$checkpoint" -i "$work/src.txt" -o "$work/ens_self.txt" --batch 4
cmp "$work/one.txt" "$work/ens_self.txt" || fail "a model with itself translated otherwise than alone"
"$tessera" train --config "$(dirname "$checkpoint")/config.yaml" --set data.synthetic_vocab=30 --set train.max_steps=1 \
  --set model.layers=1 --set data.synthetic_train_size=10 --set data.synthetic_valid_size=2 --set parallel.data=1 \
  --set output.dir="$work/symbols30" > "$work/symbols30.log" 2>&1 || { cat "$work/symbols30.log"; fail "training the 30-symbol model failed"; }
once ensemble_symbols "ensemble: checkpoint '$work/symbols30/model.h5' is a 'reverse' task's with 30 symbols" \
  -i "$work/src.txt" --checkpoint "$work/symbols30/model.h5"
# Sentences or weights that differ between the ranks (node-local files; here each rank is given
# its own): one message, no output, no crash in the exchange of the translations.
differ() {  # differ NAME PATTERN RANK0_ARGS -- RANK1_ARGS
  name=$1 pattern=$2 && shift 2
  a="" && while [ "$1" != "--" ]; do a="$a $1" && shift; done && shift
  status=0
  timeout 60 mpirun --oversubscribe -np 1 "$tessera" $a -o "$work/$name.txt" : -np 1 "$tessera" "$@" \
    -o "$work/$name.txt" > "$work/$name.log" 2>&1 || status=$?
  [ $status -ne 0 ] && [ $status -ne 124 ] && [ "$(grep -c "$pattern" "$work/$name.log")" -eq 1 ] \
    && [ ! -e "$work/$name.txt" ] || { cat "$work/$name.log"; fail "$name: not refused once (status $status)"; }
}
head -n 20 "$work/src.txt" > "$work/src_part.txt"
differ differ_input "input file '$work/src.txt' differs between the ranks: 1 of 2 ranks read other contents" \
  translate --checkpoint "$checkpoint" -i "$work/src.txt" -- translate --checkpoint "$checkpoint" -i "$work/src_part.txt"
differ differ_input_later "input file '$work/src.txt' differs between the ranks: 1 of 2 ranks read other contents" \
  translate --checkpoint "$checkpoint" -i "$work/src.txt" --buffer 8 -- translate --checkpoint "$checkpoint" -i "$work/src_part.txt" --buffer 8
differ differ_buffer "buffer (8) differs between the ranks: 1 of 2 ranks were given another number" \
  translate --checkpoint "$checkpoint" -i "$work/src.txt" --buffer 8 -- translate --checkpoint "$checkpoint" -i "$work/src.txt" --buffer 9
differ differ_weights "checkpoint '$checkpoint' (its weights) differs between the ranks" \
  translate --checkpoint "$checkpoint" -i "$work/src.txt" -- translate --checkpoint "$earlier" -i "$work/src.txt"
# ... and so do command lines that differ (an MPMD launch): the decoding options, the ensemble's size.
differ differ_options "the decoding configuration (--beam, --length-penalty, --batch, .*) differs between the ranks: 1 of 2 ranks were given other ones" \
  translate --checkpoint "$checkpoint" -i "$work/src.txt" --batch 1 -- translate --checkpoint "$checkpoint" -i "$work/src.txt" --batch 7
differ differ_members "the number of checkpoints (1) differs between the ranks" \
  translate --checkpoint "$checkpoint" -i "$work/src.txt" -- translate --checkpoint "$checkpoint" "$earlier" -i "$work/src.txt"
# A rank without -i (it would read standard input, which mpirun gives rank 0 alone) is counted:
# every rank refuses (the others hung, waiting for it in a collective without a timeout).
differ differ_stdin "tessera: error: translate under mpirun: give the sentences with -i FILE" \
  translate --checkpoint "$checkpoint" -i "$work/src.txt" -- translate --checkpoint "$checkpoint"

# score --checkpoint: the reverse task's reference is the source reversed.
awk '{ for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "\n") }' "$work/src.txt" > "$work/ref.txt"
# score --checkpoint compares the decoding configuration between the ranks too: no score.
status=0
timeout 60 mpirun --oversubscribe -np 1 "$tessera" score --ref "$work/ref.txt" --checkpoint "$checkpoint" --src "$work/src.txt" \
  --batch 1 : -np 1 "$tessera" score --ref "$work/ref.txt" --checkpoint "$checkpoint" --src "$work/src.txt" --batch 7 \
  > "$work/score_differ.log" 2>&1 || status=$?
[ $status -ne 0 ] && [ $status -ne 124 ] && [ "$(grep -c "the decoding configuration (--beam, .*) differs between the ranks" \
  "$work/score_differ.log")" -eq 1 ] && ! grep -q '^BLEU' "$work/score_differ.log" ||
  { cat "$work/score_differ.log"; fail "score with other --batch on each rank: not refused once (status $status)"; }
status=0
timeout 60 mpirun --oversubscribe -np 1 "$tessera" score --ref "$work/ref.txt" --checkpoint "$checkpoint" --src "$work/src.txt" \
  : -np 1 "$tessera" score --ref "$work/ref.txt" --checkpoint "$checkpoint" --src - \
  > "$work/score_stdin.log" 2>&1 < /dev/null || status=$?
[ $status -ne 0 ] && [ $status -ne 124 ] && [ "$(grep -c "score --checkpoint under mpirun: give the source with --src FILE" \
  "$work/score_stdin.log")" -eq 1 ] && grep -q "^tessera: error: score --checkpoint under mpirun" "$work/score_stdin.log" || { cat "$work/score_stdin.log"; fail "score with --src - on one rank: not refused once (status $status)"; }
hung hung_score 0 score --ref "$work/ref.txt" --checkpoint "$checkpoint" --src "$work/src.txt" --batch 4
! grep -q '^BLEU' "$work/hung_score.log" || fail "score printed a score with a hung rank"
"$tessera" score --ref "$work/ref.txt" --checkpoint "$checkpoint" --src "$work/src.txt" --batch 4 > "$work/score_one.txt"
grep -q '^BLEU = ' "$work/score_one.txt" || fail "score --checkpoint printed no score"
mpirun -np 3 --oversubscribe "$tessera" score --ref "$work/ref.txt" --checkpoint "$checkpoint" --src "$work/src.txt" \
  --batch 4 > "$work/score_three.txt" 2> "$work/score_three.log" || { cat "$work/score_three.log"; fail "mpirun score failed"; }
cmp "$work/score_one.txt" "$work/score_three.txt" || fail "3 ranks scored otherwise than one process"
mpirun -np 2 --oversubscribe "$tessera" score --ref "$work/ref.txt" --hyp "$work/one.txt" > "$work/score_hyp.txt" \
  || fail "mpirun score --hyp failed"
cmp "$work/score_one.txt" "$work/score_hyp.txt" || fail "score --hyp under mpirun: not the one score"
"$tessera" score --ref "$work/ref.txt" --checkpoint "$checkpoint" "$earlier" --src "$work/src.txt" --batch 4 > "$work/score_ens.txt"
"$tessera" translate --checkpoint "$checkpoint" "$earlier" -i "$work/src.txt" --batch 4 \
  | "$tessera" score --ref "$work/ref.txt" > "$work/score_ens_hyp.txt"
cmp "$work/score_ens.txt" "$work/score_ens_hyp.txt" || fail "score --checkpoint A B did not score the ensemble's translation"
# A reference of the wrong length is refused once, before any translating.
head -n 5 "$work/ref.txt" > "$work/short.txt"
status=0
timeout 60 mpirun -np 2 --oversubscribe "$tessera" score --ref "$work/short.txt" --checkpoint "$checkpoint" \
  --src "$work/src.txt" > "$work/short.log" 2>&1 || status=$?
[ $status -ne 0 ] && [ $status -ne 124 ] || { cat "$work/short.log"; fail "short reference: exit status $status"; }
[ "$(grep -c "source file '$work/src.txt' has 41 lines but reference file '$work/short.txt' has 5 lines" \
  "$work/short.log")" -eq 1 ] || { cat "$work/short.log"; fail "short reference: not one message"; }
# average is not distributed: under mpirun rank 0 alone writes the output (all of them raced on it).
cp "$checkpoint" "$work/copy.h5"
mpirun -np 3 --oversubscribe "$tessera" average "$checkpoint" "$work/copy.h5" -o "$work/avg.h5" > "$work/avg.log" 2>&1 ||
  { cat "$work/avg.log"; fail "average under mpirun failed"; }
[ "$(grep -c '^average: wrote' "$work/avg.log")" -eq 1 ] || { cat "$work/avg.log"; fail "average under mpirun: not one output"; }
"$tessera" translate --checkpoint "$work/avg.h5" -i "$work/src.txt" -o "$work/avg.txt" --batch 4
cmp "$work/one.txt" "$work/avg.txt" || fail "the average of a checkpoint with itself translated otherwise"
echo "PASS: 3 ranks wrote one process's 41 translations (whole and in buffers) and n-best lists and scored them as one process; stdin, a missing checkpoint, a bad key, a bad line, a missing GPU and a short reference each refused once, a hung rank ending translate and score, no rank left waiting"
