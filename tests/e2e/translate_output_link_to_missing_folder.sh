#!/bin/sh
# `tessera translate -o` through a link, or a chain of them, to a missing folder is refused before
# the model is loaded (here the checkpoint does not even exist).
# Usage: translate_output_link_to_missing_folder.sh TESSERA WORKDIR
tessera=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && ln -s "$work/no_such_dir/out.txt" "$work/link2.txt" &&
  ln -s link2.txt "$work/link.txt" &&
  for output in link.txt link2.txt; do
    echo 1 | "$tessera" translate --checkpoint "$work/no_such.h5" -o "$work/$output"
  done
