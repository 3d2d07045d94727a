#!/bin/bash
# The GPU check, on a machine with one GPU: (1) every CUDA kernel against its CPU twin
# (tessera_gpu_tests), (2) GPU training against the CPU run's losses, (3) flash attention
# throughput beside PyTorch's scaled_dot_product_attention on the same shapes, and the memory
# the allocator reports. Writes a Markdown report.
#   tests/gpu/check.sh BIN_DIR REPORT
# BIN_DIR holds tessera_gpu_tests and tessera_gpu_bench: a build's tests/ folder, or a bundle
# made here by tests/gpu/bundle.sh (with lib/ beside them) for a GPU image without our libraries.
set -uo pipefail
bin=$1 report=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$(dirname "$report")"
# CUDA libraries: the toolkit's, else the ones PyTorch's wheels carry.
libs="$bin/lib:/usr/local/cuda/lib64"
for d in $(python3 -c 'import nvidia, os; r = nvidia.__path__[0]; print(" ".join(os.path.join(r, x, "lib") for x in os.listdir(r)))' 2>/dev/null); do
  libs="$libs:$d"
done
export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"

{
  echo "# Tessera GPU check — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -3
  echo '```'
  echo
  echo "## 1. CUDA kernels against their CPU twins"
  echo
  echo '```'
  timeout 300 "$bin/tessera_gpu_tests" 2>&1 | grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|worst at|error' | head -80
  echo "exit status: ${PIPESTATUS[0]}"
  echo '```'
  echo
  echo "## 2. Training on the GPU against the CPU run"
  echo
  echo "Not run: the model does not train on the GPU yet (the kernels exist; the autograd ops do"
  echo "not dispatch to them)."
  echo
  echo "## 3. Flash attention, bf16, FlashAttention's FLOP convention (fwd+bwd = 3.5 x fwd)"
  echo
  timeout 200 "$bin/tessera_gpu_bench" > /tmp/tessera_bench.csv 2>&1
  echo "exit status: $?"
  timeout 200 python3 "$here/sdpa_reference.py" > /tmp/sdpa.csv 2>&1
  python3 - /tmp/tessera_bench.csv /tmp/sdpa.csv <<'PY'
import csv, sys
def rows(path):
    lines = [l for l in open(path) if l and not l.startswith("#")]
    try:
        return {(r["d"], r["causal"], r["seqlen"]): r for r in csv.DictReader(lines)}
    except Exception:
        return {}
ours, torch = rows(sys.argv[1]), rows(sys.argv[2])
for path in sys.argv[1:]:
    for l in open(path):
        if l.startswith("#") or "not" in l:
            print("    " + l.rstrip())
print("| d | causal | seqlen | ours fwd TFLOP/s | ours fwd+bwd | SDPA fwd | SDPA fwd+bwd | fwd+bwd ratio |")
print("|---|---|---|---|---|---|---|---|")
for key, r in ours.items():
    t = torch.get(key)
    ratio = f"{float(r['fwd_bwd_tflops']) / float(t['fwd_bwd_tflops']):.2f}" if t else "-"
    print(f"| {key[0]} | {key[1]} | {key[2]} | {r['fwd_tflops']} | {r['fwd_bwd_tflops']} | "
          f"{t['fwd_tflops'] if t else '-'} | {t['fwd_bwd_tflops'] if t else '-'} | {ratio} |")
PY
  echo
  echo "Training tokens/s and model-FLOPs utilization for base and big: not measured (no GPU training yet)."
} > "$report" 2>&1
cat "$report"
