#!/bin/sh
# A `tessera translate -o` write that fails (a file-size limit) leaves the old file as it was, also
# under a name near the longest a folder takes (250 bytes, where "NAME.tmpXXXXXX" would be too
# long): for each, the error, tessera_exit=1 and PREV; then the folder's listing.
# Usage: translate_output_write_fails.sh TESSERA CHECKPOINT WORKDIR
tessera=$1 checkpoint=$2 work=$3
long_name=$(printf '%0250d' 0 | tr 0 d)
rm -rf "$work" && mkdir -p "$work" && cd "$work" &&
  for i in $(seq 300); do echo '3 1 4 1 5 9 2 6 5 3 5 8'; done > in.txt &&
  for output in out.txt $long_name; do
    echo PREV > $output && (ulimit -f 4; "$tessera" translate --checkpoint "$checkpoint" -i in.txt -o $output)
    echo tessera_exit=$?
    cat $output
  done
ls
