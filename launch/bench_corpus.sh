#!/bin/sh
# Per-rank memory of training under mpirun -np 2 on a synthetic parallel corpus of each size given:
# the corpus is encoded into one corpus file (data.cache) that both ranks map, so their anonymous
# (private) memory should not grow with the corpus; its pages are counted as RssFile, shared.
# Writes the text, the corpus file and the runs under WORK (default /tmp/tessera_bench_corpus) and
# deletes them at the end (KEEP=1 keeps them; text and vocabulary already there are used). The
# first run encodes under mpirun -np ENCODE_RANKS (default 2), one thread a rank; the second maps
# the file it kept, under mpirun -np 2. A benchmark, not a test: it takes minutes.
# Usage: launch/bench_corpus.sh TESSERA [PAIRS...]   (default PAIRS: 200000 20000000)
set -eu
tessera=$1
shift
[ $# -gt 0 ] || set -- 200000 20000000
case $tessera in /*) ;; *) tessera=$(pwd)/$tessera ;; esac
work=${WORK:-/tmp/tessera_bench_corpus}
mkdir -p "$work"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
mpirun="mpirun --oversubscribe --allow-run-as-root"

# N pairs of short sentences (3 to 8 words of a 2,000-word vocabulary; the target reverses the
# source's words and marks them), the same for a given N.
make_corpus() {
  awk -v n="$1" -v en="$2" -v de="$3" 'BEGIN {
    srand(17)
    for (i = 0; i < n; ++i) {
      k = 3 + int(rand() * 6); s = ""; t = ""
      for (j = 0; j < k; ++j) { w = "w" int(rand() * 2000); s = s (j ? " " : "") w; t = w "e" (j ? " " : "") t }
      print s > en; print t > de
    }
  }'
}

# Samples every rank's /proc/PID/status while it runs: the peaks of VmRSS, RssAnon and RssFile,
# and VmHWM at the end, one line a rank into $1.
monitor() {
  out=$1
  shift
  "$@" &
  pid=$!
  while kill -0 "$pid" 2> /dev/null; do
    grep -E '^(VmRSS|VmHWM|RssAnon|RssFile|RssShmem):' "/proc/$pid/status" 2> /dev/null >> "$out.samples" || true
    sleep 0.2
  done
  status=0
  wait "$pid" || status=$?
  awk '{ if ($2 > max[$1]) max[$1] = $2 } END {
    printf "VmHWM %d MB, peak VmRSS %d MB, peak RssAnon %d MB, peak RssFile %d MB, peak RssShmem %d MB\n",
      max["VmHWM:"] / 1024, max["VmRSS:"] / 1024, max["RssAnon:"] / 1024, max["RssFile:"] / 1024, max["RssShmem:"] / 1024
  }' "$out.samples" > "$out"
  return $status
}

train() {  # ranks, run name, corpus prefix, extra --set options
  ranks=$1 name=$2 corpus=$3
  shift 3
  $mpirun -np "$ranks" sh -c 'f=$0 out=$1; shift; . "$f"; monitor "$out.rank$OMPI_COMM_WORLD_RANK" "$@"' "$work/monitor.sh" "$work/$name" \
    "$tessera" train --set data.train_src="$corpus.en" --set data.train_tgt="$corpus.de" \
    --set data.valid_src="$work/valid.en" --set data.valid_tgt="$work/valid.de" --set data.vocab="$work/vocab.model" \
    --set data.cache_dir="$work/cache" --set parallel.data="$ranks" --set model.layers=1 --set model.d_model=32 \
    --set model.d_ff=64 --set model.heads=2 --set train.batch_tokens=1024 --set train.max_steps=3 \
    --set train.log_every=1 --set train.valid_every=0 --set train.valid_max_sentences=20 \
    --set decode.max_extra_len=5 --set output.dir="$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; echo "FAIL: $name"; exit 1; }
}
sed -n '/^monitor() {/,/^}/p' "$0" > "$work/monitor.sh"

for pairs in "$@"; do
  corpus=$work/train_$pairs
  t0=$(date +%s)
  [ -e "$corpus.de" ] || make_corpus "$pairs" "$corpus.en" "$corpus.de"
  t1=$(date +%s)
  if [ ! -e "$work/vocab.model" ]; then  # one vocabulary for every size, trained on the first
    head -n 20 "$corpus.en" > "$work/valid.en" && head -n 20 "$corpus.de" > "$work/valid.de"
    "$tessera" vocab --input "$corpus.en" --input "$corpus.de" --model-prefix "$work/vocab" --vocab-size 1000 > /dev/null
  fi
  export OMP_NUM_THREADS=1
  train "${ENCODE_RANKS:-2}" "encode_$pairs" "$corpus"  # encodes the corpus file, then trains
  unset OMP_NUM_THREADS
  t2=$(date +%s)
  train 2 "mapped_$pairs" "$corpus"  # maps the file the first run kept
  echo "== $pairs pairs: text $(du -m "$corpus.en" "$corpus.de" | awk '{ s += $1 } END { print s }') MB made in $((t1 - t0)) s;" \
    "encoded and trained in $((t2 - t1)) s (${ENCODE_RANKS:-2} ranks); corpus file $(du -m "$work"/cache/encoded_train_*.bin | awk '{ print $1 }') MB"
  grep -E "^data: (kept|read|encoded|[0-9]+ training)" "$work/encode_$pairs.log" "$work/mapped_$pairs.log" | sed "s|^[^:]*/||"
  for r in 0 1; do
    echo "  encode run, rank $r: $(cat "$work/encode_$pairs.rank$r")"
    echo "  mapped run, rank $r: $(cat "$work/mapped_$pairs.rank$r")"
  done
  df -h "$work" | tail -n 1
  rm -rf "$corpus.en" "$corpus.de" "$work/cache" "$work/encode_$pairs" "$work/mapped_$pairs"
done
