# Sourced by the e2e scripts that hold rank 0 with TESSERA_FAULT_TEXT_READ=MARKER:
# wait_for_marker MARKER PID LOG waits (at most 60 s) until the run PID (its output in LOG) has
# read the text and created MARKER; else it stops the run and fails.
wait_for_marker() {
  i=0
  until [ -e "$1" ]; do
    i=$((i + 1))
    [ $i -lt 600 ] || { kill "$2"; cat "$3"; fail "rank 0 did not read the text within 60 s"; }
    sleep 0.1
  done
}
