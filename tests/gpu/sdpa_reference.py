#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of bench_attention.cpp (same CSV rows).

Runs only where torch with CUDA is importable (the GPU machine's image); prints a note otherwise.
"""
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("# torch is not importable: no SDPA reference")
    sys.exit(0)
if not torch.cuda.is_available():
    print("# torch has no CUDA device: no SDPA reference")
    sys.exit(0)


def time_ms(fn, repeats=10):
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeats


print("d,causal,seqlen,batch,heads,fwd_ms,fwd_bwd_ms,fwd_tflops,fwd_bwd_tflops")
for d in (64, 128):
    for causal in (False, True):
        for s in (512, 1024, 2048, 4096):
            b, h = 16384 // s, 2048 // d
            q, k, v, dout = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            for t in (q, k, v):
                t.requires_grad_(True)
            fwd_ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))

            def both():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                out.backward(dout)

            both_ms = time_ms(both)
            flops = 4.0 * b * s * s * h * d / (2.0 if causal else 1.0)
            print(f"{d},{int(causal)},{s},{b},{h},{fwd_ms:.3f},{both_ms:.3f},"
                  f"{flops / (fwd_ms * 1e9):.1f},{3.5 * flops / (both_ms * 1e9):.1f}")
