#!/bin/sh
# data.cache: the first start keeps the encoded training pairs in output.dir; a resume reads them
# instead of encoding, and trains exactly as one that encodes; another text makes another file; a
# damaged file is not used (and is written anew); a folder that cannot be written costs a note, not
# the run; data.cache: false neither reads nor writes one; under mpirun every rank reads it.
# Usage: encoded_cache.sh TESSERA CORPUS_DIR WORKDIR
set -eu
tessera=$1 corpus=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
en=$corpus/multi30k_300.en de=$corpus/multi30k_300.de
head -n 20 "$en" > "$work/valid.en"
head -n 20 "$de" > "$work/valid.de"
# A run folder and the log of a start into it; extra arguments are --set options.
train() {
  dir=$1 log=$2
  shift 2
  "$tessera" train --set data.train_src="$en" --set data.train_tgt="$de" --set data.valid_src="$work/valid.en" \
    --set data.valid_tgt="$work/valid.de" --set data.vocab_size=300 --set model.layers=1 --set model.d_model=32 \
    --set model.d_ff=64 --set model.heads=2 --set train.warmup=3 --set train.log_every=1 --set train.batch_tokens=512 \
    --set train.valid_every=0 --set checkpoint.every=2 --set decode.max_extra_len=5 --set output.dir="$dir" "$@" \
    > "$work/$log.log" 2>&1 || { cat "$work/$log.log"; fail "$log: training failed"; }
}
caches() { find "$1" -name 'encoded_train_*.bin' | sort; }
kept_line() { grep '^data: [0-9]* training pairs kept' "$work/$1.log"; }
steps() { grep '^step' "$work/$1.log" | sed 's/ | [0-9]* tok\/s.*//'; }

train "$work/run" first --set train.max_steps=4
cache=$(caches "$work/run")
[ "$(echo "$cache" | wc -w)" -eq 1 ] || fail "not one cache file after the first start: $cache"
grep -qx "data: kept the encoded training pairs in $cache for later starts" "$work/first.log" ||
  { cat "$work/first.log"; fail "the first start did not say it kept the pairs"; }
cp -r "$work/run" "$work/run_nocache"

# A resume reads them, and trains as a resume that encodes the text.
train "$work/run" resumed --set train.max_steps=6 --resume
grep -q "^data: read the encoded training pairs from $cache (" "$work/resumed.log" ||
  { cat "$work/resumed.log"; fail "the resume did not read the cached pairs"; }
[ "$(kept_line resumed)" = "$(kept_line first)" ] || fail "the cached pairs' counts differ: $(kept_line resumed)"
train "$work/run_nocache" encoded --set train.max_steps=6 --set data.cache=false --resume
grep -q "encoded training pairs" "$work/encoded.log" && fail "data.cache: false used the cache"
[ "$(caches "$work/run_nocache" | wc -l)" -eq 1 ] || fail "data.cache: false wrote a cache file"
steps resumed > "$work/resumed.steps"
steps encoded > "$work/encoded.steps"
cat "$work/resumed.steps"
[ "$(wc -l < "$work/resumed.steps")" -eq 2 ] || fail "the resume did not log steps 5 and 6"
cmp "$work/resumed.steps" "$work/encoded.steps" || { cat "$work/encoded.steps"; fail "the cached pairs trained otherwise"; }

# Another text (one word changed): another file, the first one kept.
sed '3s/^[^ ]*/Zebras/' "$en" > "$work/changed.en"
cmp -s "$en" "$work/changed.en" && fail "the changed text is not changed"
en_orig=$en en=$work/changed.en
train "$work/run" changed --set train.max_steps=7 --resume
[ "$(caches "$work/run" | wc -l)" -eq 2 ] || fail "the changed text did not make a second file: $(caches "$work/run")"
changed_cache=$(caches "$work/run" | grep -vx "$cache")
grep -qx "data: kept the encoded training pairs in $changed_cache for later starts" "$work/changed.log" ||
  { cat "$work/changed.log"; fail "the changed text was not encoded and kept"; }
en=$en_orig

# A damaged file (a byte short) is not used, and is written anew.
size=$(wc -c < "$cache")
truncate -s -1 "$cache"
train "$work/run" damaged --set train.max_steps=8 --resume
grep -qx "data: not using $cache: it has $((size - 1)) bytes where its header says $size (truncated or damaged); encoding the text again" \
  "$work/damaged.log" || { cat "$work/damaged.log"; fail "the damaged file was not refused, saying why"; }
grep -qx "data: kept the encoded training pairs in $cache for later starts" "$work/damaged.log" ||
  fail "the damaged file was not written anew"
[ "$(wc -c < "$cache")" -eq "$size" ] || fail "the file written anew has $(wc -c < "$cache") bytes, not $size"

# A cache folder that cannot be made: a note, and the run goes on.
train "$work/run" unwritable --set train.max_steps=9 --set data.cache_dir=/proc/tessera_no_such --resume
grep -q "^data: note: the encoded training pairs are not kept for later starts: " "$work/unwritable.log" ||
  { cat "$work/unwritable.log"; fail "no note for a cache folder that cannot be made"; }
grep -q "^step 9 " "$work/unwritable.log" || fail "the run did not go on without its cache"

# Under mpirun (two data-parallel ranks), every rank reads the file: it says so once.
if command -v mpirun > /dev/null; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe \
    "$tessera" train --config "$work/run/config.yaml" --set train.max_steps=10 --set parallel.data=2 \
    --set data.cache_dir= --resume > "$work/mpi.log" 2>&1 || { cat "$work/mpi.log"; fail "mpirun resume failed"; }
  [ "$(grep -c "^data: read the encoded training pairs from $cache (" "$work/mpi.log")" -eq 1 ] ||
    { cat "$work/mpi.log"; fail "under mpirun the ranks did not read the cached pairs (once in the log)"; }
  grep -q "^step 10 " "$work/mpi.log" || fail "the mpirun resume did not train"
fi
echo PASS
