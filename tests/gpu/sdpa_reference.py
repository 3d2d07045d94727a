#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of bench_attention.cpp (same CSV rows).

Runs only where torch with CUDA is importable (the GPU machine's image); prints a note otherwise.
Timed as bench_attention.cpp times ours: warm up for 100 ms, then enough calls for about 60 ms.
The gradients are taken with torch.autograd.grad, so that no timed call also adds onto the
.grad of an earlier one (our benchmark writes fresh gradients each call too). Every row is
flushed at once: a timeout keeps the rows already measured.
"""
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("# torch is not importable: no SDPA reference", flush=True)
    sys.exit(0)
if not torch.cuda.is_available():
    print("# torch has no CUDA device: no SDPA reference", flush=True)
    sys.exit(0)


def time_ms(fn):
    fn()
    torch.cuda.synchronize()
    warm_start = time.perf_counter()
    calls = 0
    while time.perf_counter() - warm_start < 0.1 or calls < 3:
        fn()
        calls += 1
        torch.cuda.synchronize()
    per_call = 1000.0 * (time.perf_counter() - warm_start) / calls
    repeats = min(100, max(3, int(60.0 / per_call + 1)))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeats


def backend_kernels(q, k, v, causal):
    """The CUDA kernels one forward and backward launch: says which SDPA backend torch chose."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
            torch.cuda.synchronize()
        names = sorted({e.key for e in prof.key_averages()
                        if any(w in e.key.lower() for w in ("flash", "fmha", "cudnn", "attention", "sdpa"))})
        return "; ".join(n[:80] for n in names[:4]) or "(no attention kernel named)"
    except Exception as e:  # the profiler is a note, not a reason to lose the rows
        return f"(profiler failed: {e})"


print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}; SDPA backends enabled: "
      f"flash {torch.backends.cuda.flash_sdp_enabled()}, "
      f"cudnn {getattr(torch.backends.cuda, 'cudnn_sdp_enabled', lambda: 'n/a')()}, "
      f"efficient {torch.backends.cuda.mem_efficient_sdp_enabled()}", flush=True)
print("d,causal,seqlen,batch,heads,fwd_ms,fwd_bwd_ms,fwd_tflops,fwd_bwd_tflops", flush=True)
for d in (64, 128):
    for causal in (False, True):
        for s in (512, 1024, 2048, 4096):
            b, h = 16384 // s, 2048 // d
            q, k, v, dout = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            for t in (q, k, v):
                t.requires_grad_(True)
            if s == 1024:
                print(f"# SDPA kernels at d {d} causal {int(causal)} seqlen {s}: {backend_kernels(q, k, v, causal)}",
                      flush=True)
            fwd_ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))

            def both():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.autograd.grad(out, (q, k, v), dout)

            both_ms = time_ms(both)
            flops = 4.0 * b * s * s * h * d / (2.0 if causal else 1.0)
            print(f"{d},{int(causal)},{s},{b},{h},{fwd_ms:.3f},{both_ms:.3f},"
                  f"{flops / (fwd_ms * 1e9):.1f},{3.5 * flops / (both_ms * 1e9):.1f}", flush=True)
