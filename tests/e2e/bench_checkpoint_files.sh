#!/bin/sh
# `tessera bench checkpoint` runs dd without a shell (a --dir with a quote in it), under names of its
# own, and removes its files also when a write fails (a file-size limit here, as a full disk):
# prints left=0, then the failure, status=1 and left=0.
# Usage: bench_checkpoint_files.sh TESSERA CONFIG WORKDIR
tessera=$1 config=$2 work=$3
quoted="$work/it's here"
rm -rf "$work" && mkdir -p "$quoted" "$work/limited" &&
  "$tessera" bench checkpoint --config "$config" --vocab 100 --dir "$quoted" --repeats 1 &&
  echo left=$(ls -A "$quoted" | wc -l) &&
  (ulimit -f 100; "$tessera" bench checkpoint --config "$config" --vocab 4000 --dir "$work/limited" --repeats 1
   echo status=$?)
echo left=$(ls -A "$work/limited" | wc -l)
