#!/bin/sh
# `tessera translate` reads, translates and writes its input a buffer (--buffer lines) at a time:
# the translations are those of the whole input at once (greedy, --sample draws, n-best lists
# numbered across buffers; n-best scores may differ in the last digits, as between --batch sizes);
# a note or error names the line of the whole input; a bad line in a later buffer leaves an -o file
# as it was (and no temporary), also through a symbolic link or into a file with other hard links
# (written in place from a temporary); SIGTERM removes the temporary (an ignored SIGHUP stays ignored);
# a pipe gives the same buffers however its writer paces it, --buffer 1 translates each line as it
# arrives, and from a terminal (also -i /dev/stdin) each sentence typed is translated at once; another user's file in a
# sticky folder, or in a folder the user may not create files in, is written in place.
# Usage: translate_buffers.sh TESSERA CHECKPOINT WORKDIR
set -eu
tessera=$1 checkpoint=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
# 40 sequences of 1 to 20 symbols with blank lines, and line 9 longer than the model's 1023 positions.
awk 'BEGIN { srand(3); for (i = 1; i <= 40; i++) { s = ""
  if (i % 13 == 5) { print ""; continue }
  n = i == 9 ? 1100 : 1 + int(rand() * 20); for (j = 0; j < n; j++) s = s (j ? " " : "") int(rand() * 20); print s } }' > src.txt

for b in 10000 1 7; do
  "$tessera" translate --checkpoint "$checkpoint" -i src.txt --buffer $b -o greedy_$b.txt 2> note_$b.txt
  "$tessera" translate --checkpoint "$checkpoint" -i src.txt --buffer $b --sample --temperature 3 -o sample_$b.txt 2> /dev/null
  "$tessera" translate --checkpoint "$checkpoint" -i src.txt --buffer $b --beam 3 --nbest 2 -o nbest_$b.txt 2> /dev/null
  awk -F' [|][|][|] ' '{ print $1 " ||| " $2 }' nbest_$b.txt > nbest_text_$b.txt
done
[ "$(wc -l < greedy_1.txt)" -eq 40 ] || fail "not 40 translations"
for b in 1 7; do
  cmp greedy_10000.txt greedy_$b.txt || fail "--buffer $b: other translations than the whole input's"
  cmp sample_10000.txt sample_$b.txt || fail "--buffer $b: other --sample draws than the whole input's"
  cmp nbest_text_10000.txt nbest_text_$b.txt || fail "--buffer $b: other n-best lists or numbers"
  cmp note_10000.txt note_$b.txt || fail "--buffer $b: another note on stderr"
done
[ "$(cut -d' ' -f1 nbest_text_7.txt | uniq | tr '\n' ' ')" = "$(seq 0 39 | tr '\n' ' ')" ] ||
  fail "n-best lines are not numbered 0 to 39 across buffers"
grep -q "^note: input file 'src.txt', line 9 has 1100 tokens; keeping the first 1023" note_7.txt ||
  { cat note_7.txt; fail "the note does not name line 9 of the whole input"; }

# Invalid UTF-8 on line 30 (the fifth buffer of 7): the -o file is as it was, no temporary is left;
# on standard output, the buffers before it were written.
sed '30s/$/\xff/' src.txt > bad.txt
echo PREV > out.txt
status=0
"$tessera" translate --checkpoint "$checkpoint" -i bad.txt --buffer 7 -o out.txt 2> bad.log || status=$?
[ $status -eq 1 ] && grep -q "bad.txt:30: not UTF-8 text: byte [0-9]* of the line is 0xff" bad.log ||
  { cat bad.log; fail "a bad line in a later buffer: not its error (exit $status)"; }
[ "$(cat out.txt)" = PREV ] || fail "the old output was not kept"
[ -z "$(ls | grep tmp)" ] || fail "a temporary was left: $(ls | grep tmp)"
status=0
"$tessera" translate --checkpoint "$checkpoint" -i bad.txt --buffer 7 > partial.txt 2> /dev/null || status=$?
[ $status -eq 1 ] && head -28 greedy_1.txt | cmp - partial.txt || fail "standard output lacks the buffers before the bad line"

# SIGTERM while translating into a file: the temporary is removed, the old file stays.
awk 'BEGIN { srand(5); for (i = 0; i < 20000; i++) { s = ""; for (j = 0; j < 20; j++) s = s (j ? " " : "") int(rand() * 20); print s } }' > long.txt
term_while_writing() {  # term_while_writing OUT: SIGTERM once OUT's temporary has translations: exit 143, none left
  "$tessera" translate --checkpoint "$checkpoint" -i long.txt --buffer 100 -o "$1" > term.log 2>&1 &
  pid=$!
  i=0
  until ls | grep -q "^$1\.tmp" && [ -s "$(ls "$1".tmp* | head -1)" ]; do
    i=$((i + 1))
    [ $i -lt 600 ] || { kill $pid 2> /dev/null || :; fail "-o $1: no temporary with translations in it within 60 s"; }
    sleep 0.1
  done
  kill -TERM $pid
  status=0
  wait $pid || status=$?
  [ $status -eq 143 ] || { cat term.log; fail "SIGTERM into $1: exit $status, not 143"; }
  [ -z "$(ls | grep tmp)" ] || fail "SIGTERM into $1 left a temporary: $(ls | grep tmp)"
}
term_while_writing out.txt
[ "$(cat out.txt)" = PREV ] || fail "SIGTERM changed the old file"

# Through a symbolic link (the link stays; its file gets the translations) and into a file with
# another hard link (both names get them), from a temporary copied in place at the end: memory stays
# one buffer's, and a failure (SIGTERM, a bad line in a later buffer) leaves the file as it was.
echo PREV > target.txt && ln -s target.txt link.txt && echo PREV > first.txt && ln first.txt second.txt
"$tessera" translate --checkpoint "$checkpoint" -i src.txt --buffer 7 -o link.txt 2> /dev/null
[ -L link.txt ] && cmp greedy_1.txt target.txt || fail "-o a symbolic link: the link replaced, or other translations"
"$tessera" translate --checkpoint "$checkpoint" -i src.txt --buffer 7 -o first.txt 2> /dev/null
cmp greedy_1.txt second.txt && [ "$(stat -c %i first.txt)" = "$(stat -c %i second.txt)" ] ||
  fail "-o a file with another hard link: not written in place"
echo PREV > target.txt && echo PREV > first.txt
term_while_writing link.txt
term_while_writing first.txt
status=0
"$tessera" translate --checkpoint "$checkpoint" -i bad.txt --buffer 7 -o link.txt 2> /dev/null || status=$?
[ $status -eq 1 ] && [ -z "$(ls | grep tmp)" ] || fail "a bad line into a link: exit $status, or a temporary left"
[ -L link.txt ] && [ "$(cat target.txt)" = PREV ] && [ "$(cat second.txt)" = PREV ] || fail "a failure changed a linked file"

# A pipe's lines make the same buffers however the writer paces them (here, one line at a time):
# the same n-best scores to the last digit as from the file.
for line in $(seq 40); do sed -n "${line}p" src.txt; sleep 0.02; done |
  "$tessera" translate --checkpoint "$checkpoint" --beam 3 --nbest 2 > nbest_paced.txt 2> /dev/null
cmp nbest_10000.txt nbest_paced.txt || fail "a paced pipe gave other n-best scores than the file (buffers cut by timing?)"

# --buffer 1 translates each line of a pipe as soon as it has arrived, before the next is sent.
mkfifo in.fifo
"$tessera" translate --checkpoint "$checkpoint" --buffer 1 < in.fifo > streamed.txt 2> streamed.log &
pid=$!
exec 3> in.fifo
head -1 src.txt >&3
i=0
until [ "$(wc -l < streamed.txt)" -eq 1 ]; do
  i=$((i + 1))
  [ $i -lt 600 ] || { exec 3>&-; kill $pid; cat streamed.log; fail "the first line was not translated within 60 s of its arrival"; }
  sleep 0.1
done
sed -n 2p src.txt >&3
exec 3>&-
wait $pid || { cat streamed.log; fail "translating standard input failed"; }
head -2 greedy_1.txt | cmp - streamed.txt || fail "standard input's translations differ"

# From a terminal (a pseudo-terminal here), a sentence typed is translated before the next is typed,
# with the default --buffer; also when the terminal is named as the input file (-i /dev/stdin).
command -v python3 > /dev/null || fail "python3 is needed to drive a pseudo-terminal (launch/setup.sh installs it)"
python3 - "$tessera" "$checkpoint" "$(head -1 src.txt)" "$(sed -n 2p src.txt)" "$(head -2 greedy_1.txt | tr '\n' '|')" <<'PY' ||
import os, pty, select, subprocess, sys, termios
tessera, checkpoint, first, second, expected = sys.argv[1:]
for extra in ([], ["-i", "/dev/stdin"]):
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO  # the terminal does not echo what is typed
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    run = subprocess.Popen([tessera, "translate", "--checkpoint", checkpoint] + extra, stdin=slave,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    os.close(slave)
    os.write(master, (first + "\n").encode())
    ready, _, _ = select.select([run.stdout], [], [], 60)
    if not ready:
        run.kill()
        sys.exit(f"FAIL: {extra}: the sentence typed was not translated within 60 s")
    got = run.stdout.readline().decode()
    os.write(master, (second + "\n").encode() + b"\x04")  # the second sentence, then Ctrl-D: the end
    got += run.stdout.read().decode()
    run.wait(timeout=60)
    os.close(master)
    if got.replace("\n", "|") != expected or run.returncode != 0:
        sys.exit(f"FAIL: {extra}: typed: {got!r} (exit {run.returncode})")
PY
  fail "a terminal's sentences were not translated as typed"

# An ignored SIGHUP (nohup) stays ignored: the translation finishes.
head -2000 long.txt > hup_src.txt
(trap '' HUP; exec "$tessera" translate --checkpoint "$checkpoint" -i hup_src.txt --buffer 100 -o hup.txt) > hup.log 2>&1 &
pid=$!
i=0
until ls | grep -q '^hup\.txt\.tmp'; do
  i=$((i + 1))
  [ $i -lt 600 ] || { kill $pid; fail "no temporary within 60 s"; }
  sleep 0.1
done
kill -HUP $pid
wait $pid || { cat hup.log; fail "an ignored SIGHUP stopped the translation"; }
[ "$(wc -l < hup.txt)" -eq 2000 ] || fail "not 2000 translations after an ignored SIGHUP"

# A closed standard input is an error, also with -o (a temporary would take descriptor 0 and be
# read as the input); a missing input is named before an output FIFO is opened (it would wait for
# a reader).
status=0
"$tessera" translate --checkpoint "$checkpoint" -o out.txt <&- 2> closed.log || status=$?
[ $status -eq 1 ] && grep -q "cannot read standard input: Bad file descriptor" closed.log && [ "$(cat out.txt)" = PREV ] ||
  { cat closed.log; fail "closed standard input with -o: exit $status, or the file changed"; }
mkfifo out.fifo
status=0
timeout 60 "$tessera" translate --checkpoint "$checkpoint" -i missing.txt -o out.fifo 2> missing.log || status=$?
[ $status -eq 1 ] && grep -q "cannot read 'missing.txt'" missing.log ||
  { cat missing.log; fail "a missing input with an output FIFO: exit $status"; }

# Another user's files (as root, run as nobody): in a sticky folder the rename is refused and the
# temporary is copied in place; in a folder nobody may create files in, the lines are written in
# place at the end. The files keep their owner; no temporary is left.
if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null; then
  mkdir -m 1777 sticky && mkdir -m 755 closed && chmod 755 .
  echo PREV > sticky/out.txt && echo PREV > closed/out.txt && chmod 666 sticky/out.txt closed/out.txt
  chown nobody closed/out.txt && chmod 644 src.txt
  for folder in sticky closed; do
    setpriv --reuid=nobody --regid=nogroup --clear-groups "$tessera" translate --checkpoint "$checkpoint" -i src.txt \
      --buffer 7 -o $folder/out.txt 2> $folder.log || { cat $folder.log; fail "as nobody into $folder/: failed"; }
    cmp greedy_1.txt $folder/out.txt || fail "as nobody into $folder/: other translations"
    [ "$(ls $folder)" = out.txt ] || fail "as nobody into $folder/: left $(ls $folder)"
  done
  [ "$(stat -c %U sticky/out.txt)" = root ] && [ "$(stat -c %U closed/out.txt)" = nobody ] || fail "an owner changed"
else
  echo "another user's files: not tested (needs root and setpriv)"
fi
echo "translate in buffers: OK"
