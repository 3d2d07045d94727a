#!/bin/bash
# The GPU check's training runs (check_runs.sh) are ones this build's `tessera train` accepts:
# every key known and every value in range, as `--print-config` checks them. No GPU needed.
# Usage: check_runs_test.sh TESSERA OUTPUT_DIR
set -u
tessera=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/check_runs.sh"
status=0
validate() {  # validate NAME: the run_args just set
  if errors=$("$tessera" train "${run_args[@]}" --print-config 2>&1 > /dev/null); then
    echo "$1: valid"
  else
    echo "$1: $errors"
    status=1
  fi
}
for run in "cpu fp32" "cuda fp32" "cuda bf16"; do
  set -- $run
  small_run_args "$repo" "$1" "$2" "$out/small_$1_$2"
  validate "small $run"
done
for model in base big; do
  throughput_run_args "$repo" "$model" "$out/$model"
  validate "$model"
done
exit $status
