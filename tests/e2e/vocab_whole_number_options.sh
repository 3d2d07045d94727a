#!/bin/sh
# `tessera vocab`'s whole-number options are read exactly and in decimal: a negative or too large
# seed is refused (they wrapped around), and --seed 010 is ten (not octal eight: the same bytes as
# --seed 10). The refusals are printed; then same_as_10 and not_as_8.
# Usage: vocab_whole_number_options.sh TESSERA TEXT WORKDIR
tessera=$1 text=$2 work=$3
rm -rf "$work"
for option in '--seed -1' '--seed 18446744073709551616' '--input-sentence-size 0'; do
  # $option unquoted: an option and its value, two words.
  "$tessera" vocab --input "$text" --model-prefix "$work/v" $option
done
for seed in 010 10 8; do
  "$tessera" vocab --input "$text" --model-prefix "$work/s$seed" --vocab-size 100 --input-sentence-size 150 \
    --seed $seed > /dev/null
done
cmp -s "$work/s010.model" "$work/s10.model" && echo same_as_10
cmp -s "$work/s010.model" "$work/s8.model" || echo not_as_8
