#!/bin/bash
# The GPU check, on a machine with one GPU: (1) every CUDA kernel and the GPU training path
# against their CPU twins (tessera_gpu_tests, and tessera_backend_ops_tests: every op of
# kernels/ops.h, with attention over a decoder cache read in place and float32 attention on TF32), (2) 50 training steps on the GPU (float32 and
# bfloat16) against the CPU run's losses, (3) flash attention throughput beside PyTorch's
# scaled_dot_product_attention on the same shapes, (4) each hot kernel's time, GB/s and TFLOP/s
# against the roofline (its bytes and FLOPs from kernels/cost.h), and (5) training tokens/s,
# model-FLOPs utilization and peak memory for the base and big models in bfloat16. Writes a
# Markdown report.
#   tests/gpu/check.sh BIN_DIR REPORT
# BIN_DIR holds tessera, tessera_gpu_tests, tessera_backend_ops_tests, tessera_gpu_bench and
# tessera_gpu_kernel_bench: a build
# folder, or a bundle made here by tests/gpu/bundle.sh (with lib/ beside them) for a GPU image
# without our libraries.
set -uo pipefail
bin=$1 report=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/check_runs.sh"  # the settings of its training runs
work=$(mktemp -d /tmp/tessera_check.XXXXXX)
# Beside the report: the logs of every step (training logs, metrics, test and benchmark output).
logs_tarball="$(dirname "$report")/check_logs.tar.gz"
# A build folder keeps the executables in tests/ and the top; a bundle keeps them together.
exe() { if [ -x "$bin/$1" ]; then echo "$bin/$1"; else echo "$bin/tests/$1"; fi; }
# The whole check fits CHECK_BUDGET_S (default 420 s, leaving the device tool's 600 s a command
# room for the machine's start and the transfers): each step's timeout is cut to what is left,
# and a step with under 15 s left is skipped (status 125), so the worst case is the budget plus
# one kill grace. `timeout -k`: tessera finishes its step and checkpoints on the first SIGTERM,
# and a process stuck in the driver ignores it.
budget=${CHECK_BUDGET_S:-420}
limit() {
  local left=$((budget - SECONDS - 10))
  if ((left < 15)); then
    echo "skipped: the check's budget of $budget s is spent" >&2
    return 125
  fi
  timeout -k 10 "$(($1 < left ? $1 : left))" "${@:2}"
}
# The logs so far, beside the report: written after each section, so that a check cut short
# still leaves them.
save_logs() { (cd "$work" && find . -name '*.log' -o -name '*.csv' -o -name 'metrics.jsonl' | tar -czf "$logs_tarball" -T -); }
mkdir -p "$(dirname "$report")"
# CUDA libraries for our executables (not for Python, whose torch brings its own): the bundle's,
# the toolkit's, else the ones PyTorch's wheels carry.
libs="$bin/lib:/usr/local/cuda/lib64"
for d in $(python3 -c 'import nvidia, os; r = nvidia.__path__[0]; print(" ".join(os.path.join(r, x, "lib") for x in os.listdir(r)))' 2>/dev/null); do
  libs="$libs:$d"
done
# TESSERA_REQUIRE_GPU=1: a GPU test that finds no GPU fails, naming the CUDA runtime's reason
# (e.g. a driver too old for CUDA 13), instead of skipping.
ours=(env "LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-}" TESSERA_REQUIRE_GPU=1)
# The one-rank NCCL test initializes MPI without mpirun: a singleton that starts no orted, with
# the bundle's Open MPI and PMIx plugins where it carries them.
mpi=(OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
[ -d "$bin/lib/openmpi3" ] && mpi+=("OMPI_MCA_mca_base_component_path=$bin/lib/openmpi3")
[ -d "$bin/lib/pmix" ] && mpi+=("PMIX_MCA_mca_base_component_path=$bin/lib/pmix")

{
  echo "# Tessera GPU check — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -3
  nvidia-smi 2>&1 | grep -o 'CUDA Version: [0-9.]*' | head -1
  # Which CUDA libraries our executables load (a "not found" here explains every failure below).
  "${ours[@]}" ldd "$(exe tessera_gpu_tests)" 2>&1 | grep -E 'libcu|libnccl|not found' | sed 's/ (0x.*//'
  echo '```'
  echo
  echo "## 1. CUDA kernels and the GPU training path against their CPU twins"
  echo
  echo '```'
  # One process a test suite, each into its own log (a pipe into head could stop the tests): a
  # CUDA fault is sticky for the rest of its process and a crash ends it, so each suite starts
  # clean, and a crash is reported with the test it happened in. The NCCL suite last, with MPI's
  # singleton settings, so that an MPI start-up failure loses nothing else.
  suites=$("${ours[@]}" "$(exe tessera_gpu_tests)" --gtest_list_tests 2>&1 | grep -E '^[A-Za-z0-9_/]+\.$' | sed 's/\.$//' |
           grep -v '^Nccl$')
  [ -n "$suites" ] || echo "could not list the tests: $("${ours[@]}" "$(exe tessera_gpu_tests)" --gtest_list_tests 2>&1 | head -3)"
  # Every op of kernels/ops.h against the CPU (tests/backend_ops), its attention cases included:
  # d 32/64/128, causal and padded, a decoder cache's key_length, float32 on the TF32 tensor cores.
  log="$work/backend_ops.log"
  limit 90 "${ours[@]}" "$(exe tessera_backend_ops_tests)" > "$log" 2>&1
  echo "BackendOps: exit status $?"
  grep -E '^\[ *FAILED *\] .*\([0-9]+ ms\)|Failure|worst at|no GPU answers|skipped:' "$log" | head -20
  grep -E '^\[ *(PASSED|FAILED) *\] [0-9]+ test' "$log"
  for suite in $suites Nccl; do
    log="$work/gpu_tests_$suite.log"
    if [ "$suite" = Nccl ]; then
      limit 40 "${ours[@]}" "${mpi[@]}" "$(exe tessera_gpu_tests)" --gtest_filter="$suite.*" > "$log" 2>&1
    else
      # 60 s a suite (each needs seconds): a kernel that hangs in several suites leaves time for the rest.
      limit 60 "${ours[@]}" "$(exe tessera_gpu_tests)" --gtest_filter="$suite.*" > "$log" 2>&1
    fi
    status=$?
    echo "$suite: exit status $status"
    # Each test's verdict once (not gtest's closing list of failures), and why it failed.
    grep -E '^\[ *(OK|SKIPPED) *\]|^\[ *FAILED *\] .*\([0-9]+ ms\)|Failure|worst at|error|no GPU answers|skipped:' \
      "$log" | head -40
    if ((status != 0 && status != 1 && status != 125)); then
      echo "  ended abnormally in: $(grep -E '^\[ RUN *\]' "$log" | tail -1)"
      tail -3 "$log" | sed 's/^/  | /'
    fi
  done
  echo '```'
  save_logs
  echo
  echo "## 2. 50 training steps on the GPU against the CPU run"
  echo
  # The reverse task, dropout on (small_run_args in check_runs.sh). Tolerance on each step's loss,
  # relative: float32 1e-3 (kernels agree to ~1e-6; 50 Adam steps amplify it), bfloat16 5e-2 (8
  # mantissa bits). The loss alone cannot tell a wrong backward from a right one for long (the
  # task's loss soon sits near ln 21 either way), so the first step's gradient norm, of the same
  # weights and batch on both devices, is compared too: float32 1e-4, bfloat16 5e-2.
  echo '```'
  for run in "cpu" "cuda fp32" "cuda bf16"; do
    set -- $run
    dir="$work/small_$1_${2:-fp32}"
    start=$(date +%s.%N)
    small_run_args "$repo" "$1" "${2:-fp32}" "$dir"
    limit 150 "${ours[@]}" "$(exe tessera)" train "${run_args[@]}" > "$dir.log" 2>&1
    echo "$run: exit status $?, $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s"
    grep -E "^device:|error|skipped:" "$dir.log" | head -3
  done
  echo '```'
  python3 "$here/check_report.py" losses "$work"
  save_logs
  echo
  echo "## 3. Flash attention, bf16, FlashAttention's FLOP convention (fwd+bwd = 3.5 x fwd)"
  echo
  limit 150 "${ours[@]}" "$(exe tessera_gpu_bench)" > "$work/bench.csv" 2>&1
  echo "exit status: $?"
  limit 120 python3 "$here/sdpa_reference.py" > "$work/sdpa.csv" 2>&1
  python3 "$here/check_report.py" attention "$work/bench.csv" "$work/sdpa.csv"
  save_logs
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  echo
  echo "## 4. Kernels against the roofline (bytes and FLOPs: framework/kernels/cost.h)"
  echo
  limit 60 "${ours[@]}" "$(exe tessera_gpu_kernel_bench)" > "$work/kernels.csv" 2>&1
  echo "exit status: $?"
  python3 "$here/check_report.py" kernels "$work/kernels.csv" "$gpu_name"
  save_logs
  echo
  echo "## 5. Training throughput, bfloat16, one GPU"
  echo
  # The runs' settings: throughput_run_args in check_runs.sh. The last log window (steps 21-30) counts.
  # MFU = model TFLOP/s (training_flops in framework/train/step_log.cpp) / the GPU's dense bf16 peak, by its
  # name (989 TFLOP/s on an H200 or H100 SXM, 756 on an H100 PCIe: peak_tflops in check_report.py).
  echo "| model | target tok/s | model TFLOP/s | MFU | GPU peak memory | exit |"
  echo "|---|---|---|---|---|---|"
  for model in base big; do
    dir="$work/$model"
    throughput_run_args "$repo" "$model" "$dir"
    limit 200 "${ours[@]}" "$(exe tessera)" train "${run_args[@]}" > "$dir.log" 2>&1
    status=$?
    python3 "$here/check_report.py" training "$dir.log" "$model" "$status" "$gpu_name"
  done
} 2>&1 | tee "$report"
# The logs (not the checkpoints) travel beside the report.
save_logs
rm -rf "$work"
echo "report: $report; logs: $logs_tarball"
