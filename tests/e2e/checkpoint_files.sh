#!/bin/sh
# A run's checkpoint files: keep-last-K, the best, the documented HDF5 layout as h5ls shows it,
# `tessera average`, translate/score from any checkpoint, and each resume error named.
# Usage: checkpoint_files.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
expect_error() {  # expect_error PATTERN COMMAND...: fails with status 1 and prints PATTERN
  pattern=$1 && shift
  status=0
  "$@" > "$work/err.txt" 2>&1 || status=$?
  [ $status -eq 1 ] || { cat "$work/err.txt"; fail "exit status $status for: $*"; }
  grep -q -e "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "no '$pattern' in the error of: $*"; }
}
dir="$work/run"
common="--config $config --set train.log_every=10 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=50"
"$tessera" train $common --set output.dir="$dir" --set train.max_steps=50 --set train.valid_every=20 \
  --set checkpoint.every=10 --set checkpoint.keep_last=2 > "$work/train.log"

# Keep the last 2 step checkpoints, the best one, the final weights.
ls "$dir"
[ "$(ls "$dir" | grep -c '^checkpoint_[0-9]*\.h5$')" -eq 2 ] || fail "keep_last=2 kept another number of checkpoints"
for f in checkpoint_00000040.h5 checkpoint_00000050.h5 checkpoint_best.h5 model.h5 config.yaml metrics.jsonl; do
  [ -f "$dir/$f" ] || fail "$f is missing"
done
ls "$dir" | grep -q '\.tmp$' && fail "a temporary file was left behind"
# A CPU run logs the peak bytes live tensors held (model, Adam state and activations: over 1 MB).
grep -q '| mem peak [0-9.]* GiB |' "$work/train.log" || fail "no 'mem peak' on the log line"
grep -o '"host_peak_bytes": [0-9]*' "$dir/metrics.jsonl" | awk '$2 < 1000000 { bad = 1 } END { exit bad || NR != 5 }' \
  || fail "metrics.jsonl: not 5 host_peak_bytes over 1 MB"

# The documented layout, as h5ls prints it (d_model 64, d_ff 256, 2 layers, 4 heads).
h5ls -r "$dir/checkpoint_00000050.h5" > "$work/h5ls.txt"
for line in \
  '^/model/encoder\.layers\.0\.self_attn\.q_proj\.weight  *Dataset {64, 64}$' \
  '^/model/encoder\.layers\.1\.fc1\.weight  *Dataset {256, 64}$' \
  '^/model/decoder\.layers\.1\.encoder_attn\.v_proj\.bias  *Dataset {64}$' \
  '^/model/embed_tokens\.weight  *Dataset {[0-9]*, 64}$' \
  '^/optimizer/exp_avg/decoder\.layers\.0\.fc2\.weight  *Dataset {64, 256}$' \
  '^/optimizer/exp_avg_sq/encoder\.layers\.0\.self_attn\.out_proj\.weight  *Dataset {64, 64}$' \
  '^/train *Group$'; do
  grep -q "$line" "$work/h5ls.txt" || { cat "$work/h5ls.txt"; fail "h5ls does not show $line"; }
done
h5ls -r "$dir/model.h5" | grep -q '^/optimizer' && fail "model.h5 should hold weights only"
h5dump -a /train/step "$dir/checkpoint_00000050.h5" | grep -q '(0): 50' || fail "/train/step is not 50"
h5dump -a /model/embed_tokens.weight/crc32 "$dir/model.h5" | grep -q '(0): [0-9]' || fail "no crc32 attribute"

# Average two checkpoints; the result translates and scores.
"$tessera" average "$dir/checkpoint_00000040.h5" "$dir/checkpoint_00000050.h5" -o "$work/avg.h5" | grep -q ', the mean of 2 checkpoints)$' ||
  fail "average of two did not say so"
# One checkpoint: its weights alone (a weights-only copy), said as such.
"$tessera" average "$dir/checkpoint_00000040.h5" -o "$work/one.h5" | grep -q ', the weights of 1 checkpoint)$' ||
  fail "average of one did not say so"
# The same file twice (it would weigh double) and an output that is an input (a full checkpoint
# replaced by weights only) are refused, and nothing is written.
cp "$dir/checkpoint_00000040.h5" "$work/c40.h5"
before40=$(md5sum < "$work/c40.h5")
status=0
"$tessera" average "$work/c40.h5" "$dir/checkpoint_00000050.h5" -o "$work/c40.h5" > "$work/avg_err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "average: the output '[^']*c40.h5' is the input '[^']*c40.h5'" "$work/avg_err.txt" ||
  { cat "$work/avg_err.txt"; fail "average over one of its inputs was not refused (status $status)"; }
[ "$(md5sum < "$work/c40.h5")" = "$before40" ] || fail "a refused average changed its input"
status=0
"$tessera" average "$work/c40.h5" "$work/../$(basename "$work")/c40.h5" -o "$work/dup.h5" > "$work/avg_err.txt" 2>&1 || status=$?
[ $status -eq 1 ] && grep -q "are the same file: each checkpoint counts once" "$work/avg_err.txt" ||
  { cat "$work/avg_err.txt"; fail "the same checkpoint twice was not refused (status $status)"; }
[ -e "$work/dup.h5" ] && fail "a refused average wrote its output"
# An output that is a symbolic link is written through (the link stays); a FIFO or a device is
# refused, not replaced by a file.
echo old > "$work/target.h5" && ln -s target.h5 "$work/link.h5"
"$tessera" average "$dir/checkpoint_00000040.h5" "$dir/checkpoint_00000050.h5" -o "$work/link.h5" > /dev/null ||
  fail "average into a symbolic link failed"
[ -L "$work/link.h5" ] || fail "average replaced the symbolic link it was given as output"
h5diff "$work/target.h5" "$work/avg.h5" /model /model > /dev/null || fail "average through a symbolic link did not write the average into its target"
mkfifo "$work/fifo.h5"
expect_error "average: the output '[^']*fifo\.h5' is not a regular file (a device, FIFO or socket): give the path of a file to write" \
  "$tessera" average "$dir/checkpoint_00000040.h5" -o "$work/fifo.h5"
[ -p "$work/fifo.h5" ] || fail "a refused average replaced the FIFO"
# A link that leads to no file path (standard output that is a pipe) is refused, not written as ''.
( st=0; "$tessera" average "$dir/checkpoint_00000040.h5" -o /dev/stdout || st=$?; echo "status=$st" >&2 ) 2> "$work/err.txt" |
  cat > /dev/null
grep -q "average: the output '/dev/stdout' is a symbolic link that does not lead to a file path" "$work/err.txt" &&
  grep -q '^status=1$' "$work/err.txt" || { cat "$work/err.txt"; fail "average into a pipe was not refused"; }
echo "1 2 3 4 5 6 7 8 9 10" > "$work/src.txt"
echo "10 9 8 7 6 5 4 3 2 1" > "$work/ref.txt"
for ckpt in "$work/avg.h5" "$dir/checkpoint_best.h5" "$dir/checkpoint_00000040.h5"; do
  "$tessera" translate --checkpoint "$ckpt" -i "$work/src.txt" > "$work/hyp.txt" || fail "translate with $ckpt"
  grep -qx '[0-9][0-9 ]*' "$work/hyp.txt" || { cat "$work/hyp.txt"; fail "translate with $ckpt wrote no symbols"; }
  "$tessera" score --checkpoint "$ckpt" --src "$work/src.txt" --ref "$work/ref.txt" | grep -q '^BLEU = ' || fail "score with $ckpt"
done

# A resume that cannot work is refused from the checkpoint's header, before the data is prepared,
# and writes nothing into a new output.dir.
expect_error "cannot resume from '[^']*model\.h5': it holds weights only" \
  "$tessera" train $common --set output.dir="$work/other" --set train.max_steps=60 --resume "$dir/model.h5"
grep -q '^data: ' "$work/err.txt" && fail "the data was prepared before a weights-only resume was refused"
[ -e "$work/other" ] && fail "a refused resume created the new output.dir: $(ls -A "$work/other")"
expect_error "cannot resume from '[^']*checkpoint_00000050\.h5': its model does not have this config's shape (model\.layers = 2 there, 1 in this config; model\.d_model = 64 there, 32 in this config)" \
  "$tessera" train $common --set output.dir="$work/other" --set model.d_model=32 --set model.layers=1 \
  --resume "$dir/checkpoint_00000050.h5"
grep -q '^data: ' "$work/err.txt" && fail "the data was prepared before a resume of another shape was refused"
# ... and so is each other key that shapes the model: the layer norms' place, the embeddings'
# sharing, the output's tying, the synthetic symbols, a corpus task for a synthetic task's model.
expect_error "its model does not have this config's shape (model\.d_ff = 256 there, 128 in this config; model\.norm = pre there, post in this config; model\.share_embeddings = true there, false in this config; model\.tie_output = true there, false in this config; data\.synthetic_vocab = 20 there, 30 in this config)" \
  "$tessera" train $common --set output.dir="$work/other" --set model.d_ff=128 --set model.norm=post \
  --set model.share_embeddings=false --set model.tie_output=false --set data.synthetic_vocab=30 \
  --resume "$dir/checkpoint_00000050.h5"
grep -q '^data: ' "$work/err.txt" && fail "the data was prepared before a resume of another shape was refused"
expect_error "its model does not have this config's shape (data\.task = reverse there, translation in this config)" \
  "$tessera" train $common --set output.dir="$work/other" --set data.task=translation --set data.train_src="$config" \
  --set data.train_tgt="$config" --set data.valid_src="$config" --set data.valid_tgt="$config" \
  --resume "$dir/checkpoint_00000050.h5"
grep -q '^data: ' "$work/err.txt" && fail "the data was prepared before a resume as a corpus task was refused"
[ -e "$work/other" ] && fail "a refused resume created the new output.dir: $(ls -A "$work/other")"
[ -e "$work/other" ] && fail "a refused resume created the new output.dir"
# Another head count (the same weights, other heads) or seed (it would not apply) is refused too.
expect_error "cannot resume from '[^']*checkpoint_00000050\.h5' with another model\.heads = 4 there, 2 in this config: its weights would be split into other heads; another train\.seed = 1 there, 7 in this config: it would not apply" \
  "$tessera" train $common --set output.dir="$work/other" --set model.heads=2 --set train.seed=7 \
  --resume "$dir/checkpoint_00000050.h5"
[ -e "$work/other" ] && fail "a refused resume created the new output.dir"
# Keys that leave the model alone may change: another synthetic task of the same vocabulary,
# another dropout (each change is printed).
cp -r "$dir" "$work/changed"
"$tessera" train $common --set output.dir="$work/changed" --set data.task=copy --set model.dropout=0.2 \
  --set train.max_steps=52 --resume > "$work/changed.log" 2>&1 || { cat "$work/changed.log"; fail "a resume with another task and dropout was refused"; }
grep -q "resume: data.task = copy (the checkpoint was written with reverse)" "$work/changed.log" || fail "the task change was not printed"
grep -q "train: resumed from .*checkpoint_00000050.h5 at step 50" "$work/changed.log" || fail "not resumed at step 50"
# A fork of the finished run (resumed at its last step into another folder) saves that step again
# as it was: the learning rate of /train too (it wrote 0, the rate before this session's first
# step); and metrics.jsonl names the checkpoint it came from in valid JSON, whatever its path holds.
mkdir -p "$work/we\"ird" && cp "$dir/checkpoint_00000050.h5" "$work/we\"ird/ck\\1.h5"
"$tessera" train $common --set output.dir="$work/fork50" --set train.max_steps=50 --set train.valid_every=20 \
  --resume "$work/we\"ird/ck\\1.h5" > "$work/fork50.log" 2>&1 || { cat "$work/fork50.log"; fail "the fork at step 50 failed"; }
lr() { h5dump -a /train/learning_rate "$1" | grep '(0)'; }
[ -n "$(lr "$dir/checkpoint_00000050.h5")" ] && [ "$(lr "$work/fork50/checkpoint_00000050.h5")" = "$(lr "$dir/checkpoint_00000050.h5")" ] \
  || fail "the fork saved the learning rate $(lr "$work/fork50/checkpoint_00000050.h5"), not $(lr "$dir/checkpoint_00000050.h5")"
grep -qF '{"resumed_from": "'"$work"'/we\"ird/ck\\1.h5", "step": 50}' "$work/fork50/metrics.jsonl" \
  || { cat "$work/fork50/metrics.jsonl"; fail "resumed_from is not the path as a JSON string"; }
# A start refused once it made its output.dir (the data no longer reaches the checkpoint's batch)
# removes it, also when the name ends with '/' or '/.' (the folder was made as the parent of
# "slash/", and left behind).
for end in / /. /./; do
  expect_error "cannot resume from '[^']*checkpoint_00000050\.h5': it stopped after batch" \
    "$tessera" train $common --set output.dir="$work/slash$end" --set data.synthetic_train_size=20 \
    --resume "$dir/checkpoint_00000050.h5"
  [ ! -e "$work/slash" ] || fail "a refused start into 'slash$end' left the output.dir it made: $(ls -A "$work/slash")"
done

# A run refused on the way (here: the checkpoint does not fit the configured model) leaves the
# folder's config.yaml, that of the run it holds, as it was.
before=$(md5sum < "$dir/config.yaml")
expect_error "cannot resume from '[^']*checkpoint_00000050\.h5': its model does not have this config's shape (model\.d_model = 64 there, 32 in this config)" \
  "$tessera" train $common --set output.dir="$dir" --set model.d_model=32 --resume
[ "$(md5sum < "$dir/config.yaml")" = "$before" ] || fail "a refused resume rewrote config.yaml"
# A fresh run (no --resume) into a folder that holds a run is refused before any work.
expect_error "output.dir '[^']*run' already holds a run (checkpoint_00000040\.h5 and 3 more): continue it with --resume" \
  "$tessera" train $common --set output.dir="$dir"
[ "$(md5sum < "$dir/config.yaml")" = "$before" ] || fail "a refused fresh run rewrote config.yaml"
expect_error "output.dir is empty" "$tessera" train $common --set output.dir=
# One train per folder: a second train into the folder of a running one (here one that stops
# responding at step 3, after its checkpoints of steps 1 and 2) is refused, naming it, before it
# looks at the folder (not "already holds a run", nor a resume from a checkpoint the running one
# may be replacing), and removes nothing of it (a checkpoint temporary included). Once that one is
# killed (-9), the folder resumes.
(TESSERA_FAULT_HANG=0:3 exec "$tessera" train $common --set output.dir="$work/busy" --set train.max_steps=4 \
  --set checkpoint.every=1) > "$work/busy.log" 2>&1 &
busy=$!
trap 'kill -9 $busy 2> /dev/null' EXIT  # a failed check below leaves no hung train behind
i=0
until [ -e "$work/busy/checkpoint_00000002.h5" ]; do
  i=$((i + 1))
  [ $i -lt 1200 ] || { kill -9 $busy; cat "$work/busy.log"; fail "the run to be locked out did not start in 120 s"; }
  sleep 0.1
done
echo partial > "$work/busy/checkpoint_00000003.h5.tmp"
for resume in "" --resume; do
  expect_error "^tessera: error: output\.dir '[^']*busy' is in use by another train (pid $busy on host [^,]*, started 20[0-9-]* [0-9:]*.*, as its [^ ]*busy/train\.lock says): wait for it to end, or train into another output\.dir$" \
    "$tessera" train $common --set output.dir="$work/busy" --set train.max_steps=4 $resume
  grep -q '^data: ' "$work/err.txt" && fail "the data was prepared before a train into a folder in use was refused"
done
[ -e "$work/busy/checkpoint_00000003.h5.tmp" ] || fail "a refused train removed a running train's checkpoint temporary"
kill -0 $busy 2> /dev/null || { cat "$work/busy.log"; fail "the running train ended while the second was refused"; }
kill -9 $busy
wait $busy && fail "the hung run ended by itself" || true
trap - EXIT
"$tessera" train $common --set output.dir="$work/busy" --set train.max_steps=4 --resume > "$work/busy2.log" 2>&1 ||
  { cat "$work/busy2.log"; fail "a train into the folder of a killed one was refused"; }
grep -q "resumed from .*checkpoint_00000002.h5 at step 2" "$work/busy2.log" || fail "the folder of the killed train did not resume"
[ -f "$work/busy/model.h5" ] || fail "the train after the killed one wrote no model.h5"
# --resume in a folder with a run's final files but no step checkpoint: refused, not restarted.
mkdir -p "$work/final_only" && cp "$dir/model.h5" "$dir/checkpoint_best.h5" "$work/final_only/"
expect_error "--resume: output.dir '[^']*final_only' holds no checkpoint_<step>.h5 but a run's checkpoint_best.h5" \
  "$tessera" train $common --set output.dir="$work/final_only" --resume
mkdir -p "$work/model_only" && cp "$dir/model.h5" "$work/model_only/"
expect_error "--resume: output.dir '[^']*model_only' holds a finished run's model.h5 (weights only)" \
  "$tessera" train $common --set output.dir="$work/model_only" --resume

expect_error "checkpoint '[^']*no_such\.h5' does not exist" \
  "$tessera" train $common --set output.dir="$dir" --resume "$work/no_such.h5"
# Checkpoints of another model are refused from their configs, before the weights are read.
expect_error "average: '[^']*small/model\.h5' is another model than '[^']*run/model\.h5' (model\.d_model = 32 there, 64 in the first): the mean of their weights is a model of neither" \
  sh -c "'$tessera' train $common --set output.dir='$work/small' --set model.d_model=32 --set train.max_steps=2 > /dev/null &&
         '$tessera' average '$dir/model.h5' '$work/small/model.h5' -o '$work/bad_avg.h5'"
[ ! -e "$work/bad_avg.h5" ] || fail "a failed average wrote its output"
# The same shapes split into other heads: refused too (shapes cannot tell).
expect_error "average: '[^']*heads2/model\.h5' is another model than '[^']*run/model\.h5' (model\.heads = 2 there, 4 in the first: the same weights split into other heads)" \
  sh -c "'$tessera' train $common --set output.dir='$work/heads2' --set model.heads=2 --set train.max_steps=2 > /dev/null &&
         '$tessera' average '$dir/model.h5' '$work/heads2/model.h5' -o '$work/bad_avg.h5'"
[ ! -e "$work/bad_avg.h5" ] || fail "a refused average wrote its output"
# Another synthetic task of the same shapes (a resume may change it; a mean of the two is neither).
expect_error "average: '[^']*copy/model\.h5' is another model than '[^']*run/model\.h5' (data\.task = copy there, reverse in the first)" \
  sh -c "'$tessera' train $common --set output.dir='$work/copy' --set data.task=copy --set train.max_steps=2 > /dev/null &&
         '$tessera' average '$dir/model.h5' '$work/copy/model.h5' -o '$work/bad_avg.h5'"
[ ! -e "$work/bad_avg.h5" ] || fail "a refused average wrote its output"
# A corrupted checkpoint (bytes of one dataset overwritten): resume names the file and the
# dataset that fails its checksum; the older checkpoint still resumes.
cp "$dir/checkpoint_00000050.h5" "$work/corrupt.h5"
offset=$(h5dump -p -H -d /optimizer/exp_avg/embed_tokens.weight "$work/corrupt.h5" | sed -n 's/^ *OFFSET \([0-9]*\)$/\1/p')
[ -n "$offset" ] || fail "no dataset offset from h5dump"
printf '\377\377\377\377\377\377\377\377' | dd of="$work/corrupt.h5" bs=1 seek=$((offset + 16)) conv=notrunc 2> /dev/null
expect_error "checkpoint '[^']*corrupt\.h5': dataset '/optimizer/exp_avg/embed_tokens\.weight' fails its checksum" \
  "$tessera" train $common --set output.dir="$dir" --set train.max_steps=60 --resume "$work/corrupt.h5"
cp "$dir/checkpoint_00000050.h5" "$dir/checkpoint_best.h5"  # as if the old run had its best at step 50
"$tessera" train $common --set output.dir="$dir" --set train.max_steps=52 --resume "$dir/checkpoint_00000040.h5" \
  > "$work/older.log"
grep -q "resumed from .*checkpoint_00000040.h5 at step 40" "$work/older.log" || fail "resume from the older checkpoint"
# That resume started a new history at step 40: the old run's checkpoint_00000050.h5 moved aside
# (not deleted), so the plain --resume below continues this run (52), not the old one (50).
grep -q "moved 2 checkpoint(s) written after step 40 .* into .*superseded_00000040" "$work/older.log" ||
  fail "the later checkpoint was not set aside"
# ... and so does checkpoint_best.h5, made the old run's step 50 above.
h5dump -a /step "$dir/superseded_00000040/checkpoint_best.h5" | grep -q '(0): 50' ||
  fail "the old run's checkpoint_best.h5 (step 50) was not set aside"
[ -f "$dir/superseded_00000040/checkpoint_00000050.h5" ] || fail "superseded_00000040/checkpoint_00000050.h5 is missing"
"$tessera" train $common --set output.dir="$dir" --set train.max_steps=53 --resume | grep -q "resumed from .*checkpoint_00000052.h5 at step 52" ||
  fail "plain --resume did not continue from step 52"
# A start from scratch into a folder whose earlier attempt saved no checkpoint (here: removed, as
# if it was killed before the first) marks the restart in metrics.jsonl.
"$tessera" train $common --set output.dir="$work/again" --set train.max_steps=3 --set train.log_every=1 > /dev/null
rm "$work/again"/*.h5
"$tessera" train $common --set output.dir="$work/again" --set train.max_steps=3 --set train.log_every=1 > /dev/null
sed -n 's/.*"step": \([0-9]*\),.*"tokens_per_s".*/\1/p; s/^{"started_from_scratch": true, "step": 0}$/restart/p' \
  "$work/again/metrics.jsonl" | tr '\n' ' ' > "$work/again.steps"
[ "$(cat "$work/again.steps")" = "1 2 3 restart 1 2 3 " ] ||
  { cat "$work/again/metrics.jsonl"; fail "the restart is not marked in metrics.jsonl: $(cat "$work/again.steps")"; }
# A latest checkpoint that cannot be read (damaged here by hand): the error names the one before.
"$tessera" train $common --set output.dir="$work/damaged" --set train.max_steps=3 --set checkpoint.every=1 \
  --set checkpoint.keep_last=0 > /dev/null
echo "not a checkpoint" > "$work/damaged/checkpoint_00000003.h5"
expect_error "checkpoint_00000003\.h5.*; resume from an earlier checkpoint with --resume [^ ]*damaged/checkpoint_00000002\.h5$" \
  "$tessera" train $common --set output.dir="$work/damaged" --set train.max_steps=4 --resume
# ... the newest that reads, when the one before is damaged too.
head -c 100 "$work/damaged/checkpoint_00000002.h5" > "$work/damaged/cut.h5" && mv "$work/damaged/cut.h5" "$work/damaged/checkpoint_00000002.h5"
expect_error "checkpoint_00000003\.h5.*; resume from an earlier checkpoint with --resume [^ ]*damaged/checkpoint_00000001\.h5$" \
  "$tessera" train $common --set output.dir="$work/damaged" --set train.max_steps=4 --resume
# ... and when its header reads but a dataset fails its checksum (one byte of its data changed).
"$tessera" train $common --set output.dir="$work/flipped" --set train.max_steps=2 --set checkpoint.every=1 \
  --set checkpoint.keep_last=0 > /dev/null
latest="$work/flipped/checkpoint_00000002.h5"
offset=$(h5dump -p -H -d /model/embed_tokens.weight "$latest" | sed -n 's/^ *OFFSET \([0-9]*\)$/\1/p')
[ -n "$offset" ] || fail "h5dump gave no offset of /model/embed_tokens.weight"
printf '\377' | dd of="$latest" bs=1 seek=$((offset + 100)) conv=notrunc status=none
expect_error "'/model/embed_tokens\.weight' fails its checksum.*; resume from an earlier checkpoint with --resume [^ ]*flipped/checkpoint_00000001\.h5$" \
  "$tessera" train $common --set output.dir="$work/flipped" --set train.max_steps=3 --resume
# ... but not for a refusal that is no damage, whatever the folder is called (a path holding the
# word "corrupted" got the hint).
"$tessera" train $common --set output.dir="$work/corrupted" --set train.max_steps=2 --set checkpoint.every=1 \
  --set checkpoint.keep_last=0 > /dev/null
expect_error "cannot resume from '[^']*corrupted/checkpoint_00000002\.h5': it stopped after batch" \
  "$tessera" train $common --set output.dir="$work/corrupted" --set train.max_steps=3 --set data.synthetic_train_size=20 --resume
grep -q "resume from an earlier checkpoint" "$work/err.txt" && { cat "$work/err.txt"; fail "a refusal that is no damage named an earlier checkpoint"; }

# An output.dir given as a bare name (no '/') that does not exist yet is created in the current folder.
(cd "$work" && "$tessera" train $common --set output.dir=bare --set train.max_steps=1 --set train.valid_every=0 \
  > "$work/bare.log" 2>&1) || { cat "$work/bare.log"; fail "output.dir given as a bare name"; }
[ -f "$work/bare/model.h5" ] || fail "no bare/model.h5 in $work: $(ls -A "$work")"
# A stray file named as a step checkpoint past int64's steps is none of the run's (it stopped
# every train there with "stoll").
touch "$work/bare/checkpoint_99999999999999999999.h5"
"$tessera" train $common --set output.dir="$work/bare" --set train.max_steps=1 --set train.valid_every=0 --resume \
  > "$work/bare2.log" 2>&1 || { cat "$work/bare2.log"; fail "a stray checkpoint_<huge step>.h5 stopped the resume"; }
echo PASS
