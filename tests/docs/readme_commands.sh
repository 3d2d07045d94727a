#!/bin/sh
# Runs README.md's main-job block (the one after "<!-- tested by: docs.readme_commands -->") as
# written, in a scratch folder that links configs/ and build/tessera, so its relative paths hold.
# Only its `tessera` commands run (setup and build are what built TESSERA), and `train` is cut
# to 2 steps and a 4-sentence validation: this checks the command line, not the model.
# Usage: readme_commands.sh SOURCE_DIR TESSERA WORKDIR
set -eu
src=$1 tessera=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
block=$(awk '/<!-- tested by: docs.readme_commands -->/ { f = 1; next } f && /^```sh/ { g = 1; next } g && /^```/ { exit } g' "$src/README.md")
[ -n "$block" ] || fail "no block after <!-- tested by: docs.readme_commands --> in README.md"
rm -rf "$work" && mkdir -p "$work/build"
ln -s "$src/configs" "$work/configs"
ln -s "$tessera" "$work/build/tessera"
cd "$work"
ran=0
# Each command of the block, split at "&&"; the block's lines are joined first.
{ printf '%s\n' "$block" | grep -v '^ *#' | tr '\n' ' ' | sed 's/ && /\n/g'; echo; } > commands.txt
while IFS= read -r command; do
  case "$command" in
    "build/tessera train "*) command="$command --set train.max_steps=2 --set train.valid_max_sentences=4" ;;
    "build/tessera "*) ;;
    *) echo "not run here: $command"; continue ;;
  esac
  echo "+ $command"
  status=0; sh -c "$command" < /dev/null > out.txt 2> err.txt || status=$?
  [ "$status" -eq 0 ] || { cat out.txt err.txt; fail "exit $status from: $command"; }
  tail -n 3 out.txt
  ran=$((ran + 1))
done < commands.txt
[ "$ran" -ge 2 ] || fail "ran $ran tessera commands from the block, expected train and translate"
[ "$(wc -l < out.txt)" -eq "$(wc -l < configs/data/multi30k/sample.en)" ] || fail "translate did not write one line per input line"
echo PASS
