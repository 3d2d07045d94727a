#!/bin/sh
# What a run meets outside its config:
#  - a run folder moved after training, resumed with its own config.yaml (whose output.dir names
#    the old place): refused, naming both folders, instead of a fresh run at the old place; with
#    --set output.dir it goes on where it is; a hand-written config.yaml beside another run's
#    checkpoints is not refused;
#  - a checkpoint this user may not read: "Permission denied", not "not an HDF5 file" (run as the
#    user nobody when root, who reads and writes anything);
#  - average -o and vocab --model-prefix onto write-protected files: refused, the files kept;
#  - checkpoints and train.lock follow the umask (a group-shared run folder with umask 002);
#  - a metrics.jsonl that can no longer grow (a file-size limit): one warning naming it, training
#    goes on to its end;
#  - a config.yaml that cannot be written: the cause named, no temporary left; so is a log on a
#    full standard output;
#  - an output.dir or a checkpoint that is a loop of links or too long a name: named as such;
#  - TESSERA_HOST_CACHE_MB that is not a whole number of megabytes: an error naming it.
# Usage: run_environment.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
chmod 755 "$work"
fail() { echo "FAIL: $*"; exit 1; }
tiny="--config $config --set data.synthetic_train_size=200 --set data.synthetic_valid_size=10 --set model.layers=1 --set model.d_model=32 --set model.d_ff=64 --set model.heads=2 --set train.valid_every=0 --set train.log_every=2 --set checkpoint.every=2"

# A moved run folder.
"$tessera" train $tiny --set train.max_steps=4 --set output.dir="$work/run" > "$work/run.log" 2>&1 || { cat "$work/run.log"; fail "the first run"; }
mv "$work/run" "$work/moved"
status=0
"$tessera" train --config "$work/moved/config.yaml" --set train.max_steps=6 --resume > "$work/moved.log" 2>&1 || status=$?
[ $status -eq 1 ] || { cat "$work/moved.log"; fail "resume of a moved folder: status $status"; }
grep -q "^tessera: error: train --resume: '$work/moved/config.yaml' is the config of the run in '$work/moved' (its checkpoints are there), but its output.dir is '$work/run' (no such folder): the folder was moved or copied.*add --set output.dir='$work/moved'$" "$work/moved.log" \
  || { cat "$work/moved.log"; fail "the moved folder's refusal"; }
[ ! -e "$work/run" ] || fail "the refused resume made the old folder"
"$tessera" train --config "$work/moved/config.yaml" --set train.max_steps=6 --resume --set output.dir="$work/moved" > "$work/moved2.log" 2>&1 \
  || { cat "$work/moved2.log"; fail "resume with --set output.dir"; }
grep -q "resumed from .*checkpoint_00000004.h5 at step 4 " "$work/moved2.log" || { cat "$work/moved2.log"; fail "not resumed at step 4"; }

# A hand-written config.yaml beside another run's step checkpoints (a project folder) is no run's
# own: --resume goes on as before (here: from scratch, its output.dir holding no checkpoint).
mkdir -p "$work/project" && cp "$work/moved/checkpoint_00000004.h5" "$work/project/"
printf 'output:\n  dir: %s\ndata:\n  task: reverse\n' "$work/project_run" > "$work/project/config.yaml"
"$tessera" train --config "$work/project/config.yaml" --resume $(echo "$tiny" | sed 's/--config [^ ]* //') --set train.max_steps=2 \
  > "$work/project.log" 2>&1 || { cat "$work/project.log"; fail "resume with a hand-written config.yaml"; }
grep -q "no checkpoint_<step>.h5 in $work/project_run; starting from scratch" "$work/project.log" || { cat "$work/project.log"; fail "the project run"; }

# An unreadable checkpoint.
cp "$work/moved/checkpoint_00000006.h5" "$work/locked.h5" && chmod 000 "$work/locked.h5"
# As root (who reads and writes anything) these run as the user nobody, where setpriv exists and
# nobody can reach the work folder and the executable; else they are skipped, and said so.
as_user=""
[ "$(id -u)" -ne 0 ] || as_user="setpriv --reuid=65534 --regid=65534 --clear-groups"
if [ -n "$as_user" ] && ! { $as_user "$tessera" --version && $as_user test -r "$work/moved/config.yaml"; } > /dev/null 2>&1; then
  echo "skipped: the permission checks (root, and setpriv or the user nobody's access to $work and $tessera missing)"
else
$as_user "$tessera" translate --checkpoint "$work/locked.h5" -i /dev/null > "$work/locked.log" 2>&1 && fail "an unreadable checkpoint was read"
grep -q "^tessera: error: cannot read checkpoint '$work/locked.h5': Permission denied$" "$work/locked.log" \
  || { cat "$work/locked.log"; fail "the unreadable checkpoint's error"; }

# Outputs that are write-protected files are refused, as the shell's `>` and translate -o refuse
# them (the rename through a temporary would replace them): average -o and vocab --model-prefix.
mkdir "$work/open" && chmod 777 "$work/open"
echo KEEP > "$work/open/avg.h5" && echo KEEP > "$work/open/v.model" && chmod 444 "$work/open/avg.h5" "$work/open/v.model"
awk 'BEGIN { for (i = 0; i < 200; ++i) print "a man rides a horse on the beach number " i }' > "$work/text.txt"
$as_user "$tessera" average "$work/moved/checkpoint_00000004.h5" "$work/moved/checkpoint_00000006.h5" -o "$work/open/avg.h5" \
  > "$work/protected.log" 2>&1 && fail "average replaced a write-protected file"
$as_user "$tessera" vocab --input "$work/text.txt" --model-prefix "$work/open/v" --vocab-size 40 >> "$work/protected.log" 2>&1 \
  && fail "vocab replaced a write-protected file"
grep -q "^tessera: error: average: cannot write '$work/open/avg.h5': Permission denied$" "$work/protected.log" &&
  grep -q "^tessera: error: vocab: cannot write '$work/open/v.model': Permission denied$" "$work/protected.log" ||
  { cat "$work/protected.log"; fail "the write-protected outputs' errors"; }
[ "$(cat "$work/open/avg.h5" "$work/open/v.model")" = "KEEP
KEEP" ] || fail "a write-protected output changed"
fi

# The umask.
(umask 002 && "$tessera" train $tiny --set train.max_steps=2 --set output.dir="$work/shared" > "$work/shared.log" 2>&1) \
  || { cat "$work/shared.log"; fail "the umask 002 run"; }
for f in checkpoint_00000002.h5 model.h5 train.lock; do
  [ "$(stat -c %a "$work/shared/$f")" = 664 ] || fail "$f has mode $(stat -c %a "$work/shared/$f") under umask 002, not 664"
done

# metrics.jsonl at a file-size limit of 4096 blocks (512 or 1024 bytes a block, by shell and mode:
# probed in this shell), far above the other files of this tiny run. The part of the line that
# fit is cut off again.
block=1024
(trap '' XFSZ; ulimit -f 1 && head -c 700 /dev/zero > "$work/probe") 2> /dev/null || block=512
mkdir -p "$work/limited"
head -c $((4096 * block - 40)) /dev/zero > "$work/limited/metrics.jsonl"
status=0
(ulimit -f 4096 && "$tessera" train $tiny --set train.max_steps=4 --set output.dir="$work/limited" > "$work/limited.log" 2>&1) || status=$?
[ $status -eq 0 ] || { cat "$work/limited.log"; fail "the run whose metrics.jsonl is at the limit: status $status"; }
[ "$(grep -c "^warning: writing '$work/limited/metrics.jsonl' failed (File too large): no more lines are written to it in this run$" "$work/limited.log")" -eq 1 ] \
  || { cat "$work/limited.log"; fail "no single warning for metrics.jsonl"; }
[ -f "$work/limited/model.h5" ] || fail "the run did not finish"
[ "$(wc -c < "$work/limited/metrics.jsonl")" -eq $((4096 * block - 40)) ] || fail "metrics.jsonl keeps part of a line"

# config.yaml that cannot be written (a limit of 4 blocks; the effective config is larger).
status=0
(ulimit -f 4 && "$tessera" train $tiny --set train.max_steps=2 --set output.dir="$work/small" > "$work/small.log" 2>&1) || status=$?
[ $status -eq 1 ] || { cat "$work/small.log"; fail "config.yaml over the limit: status $status"; }
grep -q "^tessera: error: cannot write '$work/small/config.yaml': File too large$" "$work/small.log" \
  || { cat "$work/small.log"; fail "the config.yaml error"; }
[ ! -e "$work/small/config.yaml.tmp" ] || fail "config.yaml.tmp left behind"

# An output.dir or checkpoint name that cannot be looked up (a loop of links, a name too long) is
# named with its key or as the checkpoint, not as a bare filesystem error or "does not exist".
ln -s "$work/loop_b" "$work/loop_a" && ln -s "$work/loop_a" "$work/loop_b"
long=$(printf '%0300d' 0 | tr 0 x)
for dir in "$work/loop_a/run" "$work/$long"; do
  "$tessera" train $tiny --set output.dir="$dir" > "$work/names.log" 2>&1 && fail "output.dir '$dir' accepted"
  grep -q "^tessera: error: --set output.dir=[^:]*: output.dir = '$dir': \(Too many levels of symbolic links\|File name too long\)$" "$work/names.log" \
    || { cat "$work/names.log"; fail "the error for output.dir '$dir'"; }
done
"$tessera" translate --checkpoint "$work/loop_a" -i /dev/null > "$work/names.log" 2>&1 && fail "a loop of links read as a checkpoint"
grep -q "^tessera: error: cannot read checkpoint '$work/loop_a': Too many levels of symbolic links$" "$work/names.log" \
  || { cat "$work/names.log"; fail "the error for a checkpoint that is a loop of links"; }

# A log that cannot be written (standard output on a full disk) is named as such.
"$tessera" train $tiny --set train.max_steps=2 --set output.dir="$work/full" 2> "$work/full.log" > /dev/full && fail "train to a full standard output"
grep -q "^tessera: error: writing to standard output failed: No space left on device$" "$work/full.log" || { cat "$work/full.log"; fail "the full standard output's error"; }

# TESSERA_HOST_CACHE_MB.
for value in abc -1 1e3 "" 8796093022209 99999999999999999999; do
  TESSERA_HOST_CACHE_MB=$value "$tessera" translate --checkpoint "$work/moved/model.h5" -i /dev/null > "$work/cache.log" 2>&1 \
    && fail "TESSERA_HOST_CACHE_MB='$value' accepted"
  grep -q "^tessera: error: TESSERA_HOST_CACHE_MB='$value': expected a whole number of megabytes in \[0, 8796093022208\]$" "$work/cache.log" \
    || { cat "$work/cache.log"; fail "TESSERA_HOST_CACHE_MB='$value': the error"; }
done
for value in 0 " 64 "; do
  echo 3 4 | TESSERA_HOST_CACHE_MB=$value "$tessera" translate --checkpoint "$work/moved/model.h5" > /dev/null || fail "TESSERA_HOST_CACHE_MB='$value' refused"
done
echo PASS
