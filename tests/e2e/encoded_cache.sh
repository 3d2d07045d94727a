#!/bin/sh
# data.cache: the first start keeps the encoded training pairs in output.dir; a resume reads them
# instead of encoding, and trains exactly as one that encodes; another text, max_len or vocabulary
# makes another file; runs share a data.cache_dir; a damaged file (truncated, a flipped byte, of
# format version 1) is not used (and is written anew, the same bytes); two ranks that encode a share
# each write the bytes one process writes;
# a folder that cannot be written or searched costs a note, not the run; text that changes during
# the start is refused; data.cache: false neither reads nor writes one; under mpirun every rank
# reads it, or all encode.
# Usage: encoded_cache.sh TESSERA CORPUS_DIR WORKDIR
set -eu
tessera=$1 corpus=$2 work=$3
case $tessera in /*) ;; *) tessera=$(pwd)/$tessera ;; esac  # the mpirun runs below start in other folders
rm -rf "$work" && mkdir -p "$work"
corpus=$(cd "$corpus" && pwd) work=$(cd "$work" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/wait_for_marker.sh"
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
# ... to the last digit: the logged losses and gradient norms (shortest round-trip decimals), and the weights.
grep '"loss"' "$work/run/metrics.jsonl" | sed 's/, "tokens_per_s".*//' | tail -n 2 > "$work/resumed.exact"
grep '"loss"' "$work/run_nocache/metrics.jsonl" | sed 's/, "tokens_per_s".*//' | tail -n 2 > "$work/encoded.exact"
grep -q '^{"step": 6, .*"grad_norm": ' "$work/resumed.exact" && cmp "$work/resumed.exact" "$work/encoded.exact" ||
  { cat "$work/resumed.exact" "$work/encoded.exact"; fail "the cached pairs trained otherwise in the last digits"; }
h5diff "$work/run/checkpoint_00000006.h5" "$work/run_nocache/checkpoint_00000006.h5" /model /model > /dev/null ||
  fail "the cached pairs' run has other weights at step 6"

# Another text (one word changed): another file, the first one kept.
sed '3s/^[^ ]*/Zebras/' "$en" > "$work/changed.en"
cmp -s "$en" "$work/changed.en" && fail "the changed text is not changed"
en_orig=$en en=$work/changed.en
train "$work/run" changed --set train.max_steps=7 --resume
[ "$(caches "$work/run" | wc -l)" -eq 2 ] || fail "the changed text did not make a second file: $(caches "$work/run")"
changed_cache=$(caches "$work/run" | grep -vx "$cache")
grep -q "^resume: the training text ($work/changed.en, $de) is not the text the checkpoint was trained on (fingerprint [0-9a-f]* there, [0-9a-f]* now)" \
  "$work/changed.log" || { cat "$work/changed.log"; fail "a resume on another text did not say so"; }
grep -q "^resume: the training text" "$work/resumed.log" && fail "a resume on the same text said it changed"
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
cp "$cache" "$work/cache.good"
# A flipped byte among the ids (the checksum rank 0 checks at each start), and a file of the form
# before version 2: not used, said why, and written anew, the same bytes.
last=$(tail -c 1 "$cache" | od -An -tu1 | tr -d ' ')
printf "$(printf '\\%03o' $(((last + 1) % 256)))" | dd of="$cache" bs=1 seek=$((size - 1)) conv=notrunc 2> /dev/null
cmp -s "$cache" "$work/cache.good" && fail "the byte was not flipped"
train "$work/run" flipped --set train.max_steps=8 --resume
grep -qx "data: not using $cache: its ids' checksum does not match them (damaged); encoding the text again" \
  "$work/flipped.log" || { cat "$work/flipped.log"; fail "a flipped byte was not found, saying so"; }
cmp "$cache" "$work/cache.good" || fail "the file written anew after a flipped byte differs"
{ printf 'TESSIDS1'; head -c 200 /dev/zero; } > "$cache"
train "$work/run" version1 --set train.max_steps=8 --resume
v1="it is of format version 1 (an older Tessera's); this one reads version 2"
grep -qx "data: not using $cache: $v1; encoding the text again" \
  "$work/version1.log" || { cat "$work/version1.log"; fail "a file of version 1 was not refused, saying so"; }
cmp "$cache" "$work/cache.good" || fail "the file written anew after version 1 differs"
[ -z "$(find "$work/run" -name '*.tmp')" ] || fail "temporary files left: $(find "$work/run" -name '*.tmp')"

# A cache folder that cannot be made: a note, and the run goes on.
train "$work/run" unwritable --set train.max_steps=9 --set data.cache_dir=/proc/tessera_no_such --resume
grep -q "^data: note: the encoded training pairs are not kept for later starts: " "$work/unwritable.log" ||
  { cat "$work/unwritable.log"; fail "no note for a cache folder that cannot be made"; }
grep -q "^step 9 " "$work/unwritable.log" || fail "the run did not go on without its cache"

# A cache folder that cannot be searched (a symbolic link to itself): the same.
ln -s loop "$work/loop"
train "$work/run" loop --set train.max_steps=10 --set data.cache_dir="$work/loop/x" --resume
grep -q "^data: not using $work/loop/x/encoded_train_[0-9a-f]*\.bin: Too many levels of symbolic links; encoding the text again$" \
  "$work/loop.log" && grep -q "^data: note: the encoded training pairs are not kept for later starts: " "$work/loop.log" &&
  grep -q "^step 10 " "$work/loop.log" || { cat "$work/loop.log"; fail "a cache folder that cannot be searched stopped the run"; }

# One folder shared by runs: a run given the same vocabulary file reads what another kept; another
# data.max_len, or another vocabulary, makes a file of its own.
shared=$work/shared
vocab=$work/run/vocab.model
train "$work/a" shared_a --set train.max_steps=1 --set data.vocab="$vocab" --set data.cache_dir="$shared"
train "$work/b" shared_b --set train.max_steps=1 --set data.vocab="$vocab" --set data.cache_dir="$shared"
grep -q "^data: read the encoded training pairs from $shared/encoded_train_" "$work/shared_b.log" ||
  { cat "$work/shared_b.log"; fail "a run did not read the pairs another run kept in data.cache_dir"; }
train "$work/c" shared_c --set train.max_steps=1 --set data.vocab="$vocab" --set data.cache_dir="$shared" \
  --set data.max_len=20
"$tessera" vocab --input "$en" --model-prefix "$work/en250" --vocab-size 250 > /dev/null
train "$work/d" shared_d --set train.max_steps=1 --set data.vocab="$work/en250.model" --set data.cache_dir="$shared"
for log in shared_c shared_d; do
  grep -q "^data: kept the encoded training pairs in $shared/encoded_train_" "$work/$log.log" ||
    { cat "$work/$log.log"; fail "$log: another max_len or vocabulary did not make a file of its own"; }
done
[ "$(caches "$shared" | wc -l)" -eq 3 ] || fail "not 3 files in the shared folder: $(caches "$shared")"
grep -q "longer than data.max_len=20 skipped" "$work/shared_c.log" || fail "data.max_len=20 did not apply"

# Text that changes between rank 0's first read and the encoding (rank 0 waits after its read,
# TESSERA_FAULT_TEXT_READ, while the file is replaced by a changed copy): refused, nothing cached.
cp "$en" "$work/moving.en"
TESSERA_FAULT_TEXT_READ="$work/read.marker" "$tessera" train --config "$work/a/config.yaml" \
  --set data.train_src="$work/moving.en" --set output.dir="$work/fifo_run" --set data.cache_dir= > "$work/fifo.log" 2>&1 &
pid=$!
wait_for_marker "$work/read.marker" "$pid" "$work/fifo.log"
cp "$work/changed.en" "$work/moving.en" && rm "$work/read.marker"
if wait "$pid"; then cat "$work/fifo.log"; fail "text that changed during the start was encoded"; fi
grep -q "data: the training text ('$work/moving.en', '$de') changed while this start read it: start again once the files are in place" \
  "$work/fifo.log" || { cat "$work/fifo.log"; fail "no clear error for text that changed during the start"; }
[ -z "$(caches "$work/fifo_run")" ] || fail "pairs of changed text were cached"

# Under mpirun (two data-parallel ranks), every rank reads the file: it says so once.
if command -v mpirun > /dev/null; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe \
    "$tessera" train --config "$work/run/config.yaml" --set train.max_steps=11 --set parallel.data=2 \
    --set data.cache_dir= --resume > "$work/mpi.log" 2>&1 || { cat "$work/mpi.log"; fail "mpirun resume failed"; }
  [ "$(grep -c "^data: read the encoded training pairs from $cache (" "$work/mpi.log")" -eq 1 ] ||
    { cat "$work/mpi.log"; fail "under mpirun the ranks did not read the cached pairs (once in the log)"; }
  grep -q "^step 11 " "$work/mpi.log" || fail "the mpirun resume did not train"
  # Two ranks encode a share each into parts that rank 0 joins: the very bytes one process wrote.
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe \
    "$tessera" train --config "$work/a/config.yaml" --set train.max_steps=1 --set parallel.data=2 \
    --set output.dir="$work/np2" --set data.cache_dir="$work/np2_cache" > "$work/np2.log" 2>&1 ||
    { cat "$work/np2.log"; fail "mpirun encoding failed"; }
  one=$(sed -n "s|^data: kept the encoded training pairs in \(.*\) for later starts$|\1|p" "$work/shared_a.log")
  two=$(caches "$work/np2_cache")
  [ -n "$one" ] && [ -n "$two" ] && cmp "$one" "$two" || fail "two ranks encoded other bytes than one ($one, $two)"
  [ "$(basename "$one")" = "$(basename "$two")" ] || fail "two ranks' file has another name"
  grep -q "^step 1 " "$work/np2.log" || fail "the run that encoded in two ranks did not train"
  # All or none: ranks in two folders, a relative data.cache_dir. Rank 0 keeps the file in its own;
  # then rank 1 does not find it and both encode; with a copy in rank 1's folder both read it.
  mkdir -p "$work/w0" "$work/w1"
  mpmd() {  # run name: output.dir and log
    name=$1
    set -- train --config "$work/a/config.yaml" --set output.dir="$work/$name" --set data.cache_dir=rel \
      --set parallel.data=2 --set train.max_steps=1
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 1 -wdir "$work/w0" \
      "$tessera" "$@" : -np 1 -wdir "$work/w1" "$tessera" "$@" > "$work/$name.log" 2>&1 ||
      { cat "$work/$name.log"; fail "mpirun $name failed"; }
  }
  mpmd m1
  # (Each rank first wrote its share into its own folder; rank 0 did not find rank 1's: a note.)
  part_note="the encoded part '.*' cannot be read: No such file or directory (is the folder one every rank shares?)"
  grep -q "^data: note: the encoded training pairs are not kept for later starts: $part_note$" \
    "$work/m1.log" || { cat "$work/m1.log"; fail "m1: no note on the part rank 0 could not read"; }
  [ "$(caches "$work/w0/rel" | wc -l)" -eq 1 ] && [ -z "$(caches "$work/w1/rel")" ] ||
    fail "rank 0 did not keep its file alone"
  left=$(find "$work/w0" "$work/w1" -name '*.tmp')
  [ -z "$left" ] || fail "m1 left parts: $left"
  mpmd m2
  grep -q "^data: rel/encoded_train_[0-9a-f]*\.bin is not readable on every rank (1 of 2 do not find it whole): encoding the text$" \
    "$work/m2.log" || { cat "$work/m2.log"; fail "a file rank 1 does not have was used"; }
  grep -q "^step 1 " "$work/m2.log" || fail "m2 did not train"
  mkdir -p "$work/w1/rel" && cp "$work"/w0/rel/encoded_train_*.bin "$work/w1/rel/"
  mpmd m3
  grep -q "^data: read the encoded training pairs from rel/" "$work/m3.log" ||
    { cat "$work/m3.log"; fail "with the file on both ranks, it was not read"; }
fi
echo PASS
