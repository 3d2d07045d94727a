"""The GPU check's report sections that read what the runs wrote (tests/gpu/check.sh calls it).

  check_report.py losses WORK            section 2: the GPU runs' losses against the CPU run's
  check_report.py attention BENCH SDPA   section 3: our attention throughput beside SDPA's
  check_report.py kernels BENCH [GPU_NAME]  section 4: each kernel's time, GB/s, TFLOP/s and roofline fraction
  check_report.py training LOG MODEL EXIT [GPU_NAME]  section 5: one model's training throughput row

tests/e2e/cuda_emulated.sh runs it on the emulated GPU's training logs, so that a change of the
trainer's log line or metrics breaks CI rather than the one GPU check a session gets.
"""
import csv
import json
import os
import re
import sys


def losses(work):
    """Each step's loss of small_cuda_fp32 and small_cuda_bf16 (under WORK) against small_cpu_fp32's."""

    def metric(name, key):
        path = os.path.join(work, name, "metrics.jsonl")
        if not os.path.exists(path):
            return {}
        return {r["step"]: r[key] for r in map(json.loads, open(path)) if key in r and "step" in r}

    cpu, cpu_norm = metric("small_cpu_fp32", "loss"), metric("small_cpu_fp32", "grad_norm")
    for name, tol, norm_tol in (("small_cuda_fp32", 1e-3, 1e-4), ("small_cuda_bf16", 5e-2, 5e-2)):
        gpu, gpu_norm = metric(name, "loss"), metric(name, "grad_norm")
        steps = sorted(set(cpu) & set(gpu))
        if not steps:
            print(f"- {name}: no losses to compare (see the exit status above)")
            continue
        worst = max(steps, key=lambda s: abs(gpu[s] - cpu[s]) / abs(cpu[s]))
        rel = abs(gpu[worst] - cpu[worst]) / abs(cpu[worst])
        verdict = "PASS" if rel <= tol and len(steps) == 50 else "FAIL"
        print(f"- {name}: {len(steps)} steps compared; worst relative loss difference {rel:.2e} at step {worst} "
              f"(cpu {cpu[worst]:.5f}, gpu {gpu[worst]:.5f}); final loss cpu {cpu[steps[-1]]:.5f} gpu {gpu[steps[-1]]:.5f}; "
              f"tolerance {tol:g}: {verdict}")
        if 1 in cpu_norm and 1 in gpu_norm:
            rel = abs(gpu_norm[1] - cpu_norm[1]) / abs(cpu_norm[1])
            worst = max(abs(gpu_norm[s] - cpu_norm[s]) / abs(cpu_norm[s]) for s in steps if s in cpu_norm and s in gpu_norm)
            print(f"  - step 1 gradient norm: cpu {cpu_norm[1]:.6f}, gpu {gpu_norm[1]:.6f}, relative difference {rel:.2e}, "
                  f"tolerance {norm_tol:g}: {'PASS' if rel <= norm_tol else 'FAIL'} (worst over the steps, not judged: {worst:.2e})")


def attention(bench_path, sdpa_path):
    """tessera_gpu_bench's CSV beside sdpa_reference.py's, and the issue's target at d 64."""

    def rows(path):  # the header and the rows only: a warning on stderr (torch's, say) must not become the header
        lines = [l for l in open(path) if l.startswith("d,") or l[:1].isdigit()]
        try:
            return {(r["d"], r["causal"], r["seqlen"]): r for r in csv.DictReader(lines)}
        except Exception:
            return {}

    ours, torch = rows(bench_path), rows(sdpa_path)
    for path in (bench_path, sdpa_path):  # notes, and whatever is not a CSV row (an error message)
        for l in open(path):
            if l.strip() and (l.startswith("#") or not l[:1].isdigit() and not l.startswith("d,")):
                print("    " + l.rstrip())
    print("| d | causal | seqlen | ours fwd TFLOP/s | ours fwd+bwd | SDPA fwd | SDPA fwd+bwd | fwd+bwd ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for key, r in ours.items():
        t = torch.get(key)
        ratio = f"{float(r['fwd_bwd_tflops']) / float(t['fwd_bwd_tflops']):.2f}" if t else "-"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {r['fwd_tflops']} | {r['fwd_bwd_tflops']} | "
              f"{t['fwd_tflops'] if t else '-'} | {t['fwd_bwd_tflops'] if t else '-'} | {ratio} |")
    # The target: forward+backward at least 80% of SDPA's rate at d_k 64, on every shape
    # (all 8: causal or not, 4 lengths), both sides measured.
    ratios = [float(r["fwd_bwd_tflops"]) / float(torch[k]["fwd_bwd_tflops"]) for k, r in ours.items()
              if k[0] == "64" and k in torch and float(torch[k]["fwd_bwd_tflops"]) > 0]
    if 0 < len(ratios) < 8:
        print(f"\nTarget, fwd+bwd >= 0.80 of SDPA at d 64: not judged (only {len(ratios)} of the 8 shapes measured on both "
              f"sides; worst ratio of those {min(ratios):.2f})")
    elif ratios:
        print(f"\nTarget, fwd+bwd >= 0.80 of SDPA at d 64: worst ratio {min(ratios):.2f} over {len(ratios)} shapes: "
              f"{'MET' if min(ratios) >= 0.8 else 'NOT MET'}")
    else:
        print("\nTarget, fwd+bwd >= 0.80 of SDPA at d 64: not judged (no pair of rows to compare)")


# Dense bf16 tensor-core peaks (TFLOP/s, NVIDIA's data sheets: their sparse figures halved), by
# nvidia-smi's name ("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA GH200 480GB");
# the first pattern found in the name wins, so the variants come before their family.
PEAKS = (("H100 PCIe", 756), ("H100 NVL", 835), ("H200 NVL", 835), ("H100", 989), ("H200", 989), ("A100", 312))


def peak_tflops(gpu_name):
    """The GPU's dense bf16 peak and how the report names it; the issue's H200 figure where the name is unknown."""
    for pattern, peak in PEAKS:
        if pattern in gpu_name:
            return peak, f"{gpu_name}'s {peak} TFLOP/s dense bf16"
    return 989, f"989 TFLOP/s dense bf16, the issue's H200 figure: no peak known for '{gpu_name or 'no GPU name'}'"


# Memory bandwidth (TB/s) and dense float32 CUDA-core peak (TFLOP/s), NVIDIA's data sheets, by
# nvidia-smi's name as PEAKS; the bf16 tensor-core peak is peak_tflops's.
ROOFLINES = (("H100 PCIe", 2.0, 51), ("H100 NVL", 3.9, 60), ("H200 NVL", 4.8, 60), ("H100", 3.35, 67),
             ("H200", 4.8, 67), ("A100-SXM4-80GB", 2.039, 19.5), ("A100", 1.555, 19.5))


def roofline(gpu_name):
    """(bandwidth bytes/s, {peak kind: FLOP/s}, how the report names them); the H200's where the name is unknown."""
    tensor, _ = peak_tflops(gpu_name)
    for pattern, tbps, fp32 in ROOFLINES:
        if pattern in gpu_name:
            return tbps * 1e12, {"tensor": tensor * 1e12, "fp32": fp32 * 1e12}, \
                f"{gpu_name}: {tbps} TB/s, {tensor} TFLOP/s bf16 tensor, {fp32} TFLOP/s fp32"
    return 4.8e12, {"tensor": 989e12, "fp32": 67e12}, \
        f"4.8 TB/s, 989 TFLOP/s bf16 tensor, 67 TFLOP/s fp32, the H200's: no peaks known for '{gpu_name or 'no GPU name'}'"


def kernels(bench_path, gpu_name=""):
    """tessera_gpu_kernel_bench's CSV: each kernel's time, achieved GB/s and TFLOP/s, and the fraction of
    the roofline, max(bytes / bandwidth, FLOPs / peak) over the time it took."""
    bandwidth, peaks, peak_name = roofline(gpu_name)
    with open(bench_path) as f:
        every = f.readlines()
    lines = [l for l in every if l.startswith("kernel,") or (l[:1].isalpha() and l.count(",") == 6)]
    for l in every:  # notes and errors
        if l.strip() and l not in lines:
            print("    " + l.rstrip())
    print(f"Roofline: {peak_name}.\n")
    print("| kernel | dtype | shape | ms | GB/s | TFLOP/s | FLOP/byte | bound | roofline fraction |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in csv.DictReader(lines):
        try:
            ms, nbytes, flops = float(r["ms"]), float(r["bytes"]), float(r["flops"])
            peak = peaks[r["peak"]]
            if ms <= 0:  # no timing (the CUDA emulator's events)
                raise ValueError("no time")
        except (KeyError, ValueError, TypeError):
            print(f"| {r.get('kernel')} | row not understood: {dict(r)} |")
            continue
        memory_s, compute_s = nbytes / bandwidth, flops / peak
        bound = "memory" if memory_s >= compute_s else f"{r['peak']} compute"
        fraction = max(memory_s, compute_s) / (ms * 1e-3)
        intensity = flops / nbytes if nbytes else 0.0
        print(f"| {r['kernel']} | {r['dtype']} | {r['shape']} | {ms:.3f} | {nbytes / ms / 1e6:.0f} | "
              f"{flops / ms / 1e9:.2f} | {intensity:.1f} | {bound} | {100 * fraction:.0f}% |")


def training(log, model, status, gpu_name=""):
    """The row of MODEL's training run (its last logged step), and for big the MFU target, both MFUs of
    GPU_NAME's peak."""
    peak, peak_name = peak_tflops(gpu_name)
    steps = [l for l in open(log) if l.startswith("step ")]
    if not steps:
        err = [l.strip() for l in open(log) if "error" in l or l.startswith("skipped:")][:1]
        print(f"| {model} | - | - | - | - | {status} {err[0] if err else ''} |")
        if model == "big":
            print("\nTarget, big in bf16 >= 40% MFU: not judged (no step logged)")
        return
    l = steps[-1]
    found = [re.search(p, l) for p in (r"(\d+) tok/s", r"([\d.]+) model TFLOP/s", r"gpu peak ([\d.]+) GiB")]
    if not all(found):  # a log line this script does not know: shown, not lost in a traceback
        print(f"| {model} | - | - | - | - | {status}; step line not understood: {l.strip().replace('|', '/')} |")
        if model == "big":
            print("\nTarget, big in bf16 >= 40% MFU: not judged (step line not understood)")
        return
    tok, tf, mem = found[0].group(1), float(found[1].group(1)), found[2].group(1)
    print(f"| {model} | {tok} | {tf:.1f} | {100 * tf / peak:.1f}% | {mem} GiB | {status} |")
    if model == "big":
        print(f"\nTarget, big in bf16 >= 40% MFU (of {peak_name}): {100 * tf / peak:.1f}%: "
              f"{'MET' if tf / peak >= 0.4 else 'NOT MET'}")


if __name__ == "__main__":
    sections = {"losses": losses, "attention": attention, "kernels": kernels, "training": training}
    if len(sys.argv) < 2 or sys.argv[1] not in sections:
        sys.exit(__doc__)
    sections[sys.argv[1]](*sys.argv[2:])
