#!/bin/sh
# The .vocab listing `tessera vocab` writes is the one SentencePiece itself exports from the .model
# (spm_export_vocab), for BPE and unigram scores alike: prints same_bpe, same_unigram.
# Usage: vocab_listing.sh TESSERA SPM_EXPORT_VOCAB TEXT WORKDIR
tessera=$1 export_vocab=$2 text=$3 work=$4
rm -rf "$work" &&
  for type in bpe unigram; do
    "$tessera" vocab --input "$text" --model-prefix "$work/$type" --vocab-size 300 --model-type $type > /dev/null &&
      "$export_vocab" --model "$work/$type.model" > "$work/$type.exported" &&
      cmp "$work/$type.vocab" "$work/$type.exported" && echo same_$type
  done
