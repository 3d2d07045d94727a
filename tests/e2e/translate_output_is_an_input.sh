#!/bin/sh
# `tessera translate -o` naming a file it reads (the input, the checkpoint, through another name
# too) or one below a file is refused; the files stay as they were (prints unchanged).
# Usage: translate_output_is_an_input.sh TESSERA CHECKPOINT WORKDIR
tessera=$1 checkpoint=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" && echo '3 1 4' > in.txt && cp "$checkpoint" m.h5 &&
  md5sum in.txt m.h5 > sums && ln -s in.txt link.txt &&
  for output in ./in.txt m.h5 in.txt/x; do
    "$tessera" translate --checkpoint m.h5 -i link.txt -o $output
  done
"$tessera" translate --checkpoint m.h5 -o link.txt < in.txt
"$tessera" translate --checkpoint m.h5 -i - -o /dev/stdin < in.txt
md5sum -c --quiet sums && echo unchanged
