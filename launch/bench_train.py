#!/usr/bin/env python3
"""Training throughput of Tessera next to PyTorch eager on the model of configs/multi30k.yaml.

Runs, interleaved in one session (the machine may be shared and noisy): `tessera bench kernels`
(the sgemm reference), `tessera train` for --steps steps, and, when the Python package torch is
installed, a PyTorch eager model of the same shape (post-norm, shared tied embeddings, label
smoothing 0.1, Adam) on batches of the same shape: target lengths of Multi30k sentences, about
batch_tokens target tokens each. Prints target tokens/s, model GFLOP/s, % of sgemm and the ratio.
PyTorch is optional: nothing of Tessera's build or tests needs it.
With --precision bf16 (or both), Tessera runs with train.precision bf16 (bfloat16 GEMMs through
oneDNN) and PyTorch under torch.autocast("cpu", torch.bfloat16).

  OMP_NUM_THREADS=2 python3 launch/bench_train.py --tessera build/tessera --out /tmp/bench_train
"""
import argparse
import glob
import gzip
import os
import random
import re
import statistics
import subprocess
import time

MODEL = dict(layers=3, d_model=256, d_ff=1024, heads=4, vocab=8000, batch_tokens=4096)


def flops_per_target_token(src_per_tgt=1.0, length=16):
    """Model FLOPs (forward + backward = 3x forward, multiply-add = 2) per target token."""
    d, ff, n, v = MODEL["d_model"], MODEL["d_ff"], MODEL["layers"], MODEL["vocab"]
    enc = n * (4 * d * d + 2 * d * ff + 2 * length * d)  # projections, FFN, QK^T and PV per token
    dec = n * (8 * d * d + 2 * d * ff + 4 * length * d) + d * v
    return 6.0 * (enc * src_per_tgt + dec)


def sgemm_rate(tessera):
    out = subprocess.run([tessera, "bench", "kernels", "--repeats", "3"], capture_output=True, text=True).stdout
    return float(re.search(r"sgemm 1024x1024x1024\s+([\d.]+) GFLOP/s", out).group(1))


def tessera_rate(tessera, config, out_dir, steps, precision):
    """Mean target tokens/s over the logged steps after the first (warm-up) log line."""
    for name in glob.glob(os.path.join(out_dir, "*.h5")):  # the last run's checkpoints; the vocabulary stays
        os.remove(name)
    log = subprocess.run([tessera, "train", "--config", config, "--set", f"train.max_steps={steps}",
                          "--set", f"train.precision={precision}", "--set", "train.fit_steps_to_time=false",
                          "--set", "train.log_every=4", "--set", f"output.dir={out_dir}",
                          "--set", "train.valid_every=1000000", "--set", "train.valid_max_sentences=1",
                          "--set", "checkpoint.every=1000000"], capture_output=True, text=True).stdout
    rates = [float(x) for x in re.findall(r"\| (\d+) tok/s", log)]
    if len(rates) < 2:
        raise SystemExit("tessera train logged too few steps:\n" + log[-2000:])
    return statistics.mean(rates[1:])


def target_lengths(path):
    """Approximate BPE lengths (+1 for end of sentence) of the target sentences."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [max(2, round(1.3 * len(line.split())) + 1) for line in f]


def torch_rate(lengths, steps, threads, precision):
    import torch
    import torch.nn as nn

    torch.set_num_threads(threads)
    torch.manual_seed(1)
    d, v = MODEL["d_model"], MODEL["vocab"]

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(v, d, padding_idx=0)
            self.core = nn.Transformer(d, MODEL["heads"], MODEL["layers"], MODEL["layers"], MODEL["d_ff"], 0.1,
                                       batch_first=True)
            self.pos = torch.randn(256, d) * 0.1

        def forward(self, src, tgt):
            scale = d ** 0.5
            s = self.embed(src) * scale + self.pos[: src.size(1)]
            t = self.embed(tgt) * scale + self.pos[: tgt.size(1)]
            mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
            h = self.core(s, t, tgt_mask=mask, tgt_is_causal=True)
            return h @ self.embed.weight.t()

    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1, reduction="sum")
    rng = random.Random(3)
    tokens, seconds = 0, 0.0
    for step in range(steps + 1):
        length = rng.choice(lengths)
        batch = max(1, MODEL["batch_tokens"] // length)
        src = torch.randint(4, v, (batch, length))
        tgt = torch.randint(4, v, (batch, length + 1))
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(src, tgt[:, :-1])
            loss = loss_fn(logits.reshape(-1, v).float(), tgt[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step > 0:  # the first step warms up
            seconds += time.perf_counter() - start
            tokens += batch * length
    return tokens / seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tessera", default="build/tessera")
    p.add_argument("--config", default="configs/multi30k.yaml")
    p.add_argument("--out", default="/tmp/bench_train", help="tessera's output.dir (vocabulary kept between runs)")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--precision", choices=["fp32", "bf16", "both"], default="fp32",
                   help="bf16: Tessera's train.precision bf16 and PyTorch's CPU autocast to bfloat16")
    a = p.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        print("PyTorch is not installed: Tessera alone")
    lengths = target_lengths(os.path.join(os.path.dirname(a.config), "data/multi30k/train.de.gz"))
    per_token = flops_per_target_token(length=round(statistics.mean(lengths)))
    precisions = ["fp32", "bf16"] if a.precision == "both" else [a.precision]
    rates = {}  # (who, precision) -> tokens/s per round
    sgemm = []
    for r in range(a.rounds):  # interleaved: each round measures every contestant once
        sgemm.append(sgemm_rate(a.tessera))
        for prec in precisions:
            rates.setdefault(("tessera", prec), []).append(tessera_rate(a.tessera, a.config, a.out, a.steps, prec))
            if have_torch:
                rates.setdefault(("pytorch eager", prec), []).append(torch_rate(lengths, a.steps, threads, prec))
        print(f"round {r + 1}: sgemm {sgemm[-1]:.1f} GFLOP/s, "
              + ", ".join(f"{who} {prec} {v[-1]:.0f} tok/s" for (who, prec), v in rates.items()), flush=True)
    ref = statistics.median(sgemm)
    median = {key: statistics.median(v) for key, v in rates.items()}
    for (who, prec), rate in median.items():
        gf = rate * per_token / 1e9
        print(f"{who:<14} {prec}  {rate:8.0f} target tokens/s  {gf:7.1f} GFLOP/s  {100 * gf / ref:5.1f}% of sgemm")
    for ours, theirs in ((("tessera", p), ("pytorch eager", q)) for p in precisions for q in precisions):
        if ours in median and theirs in median:
            print(f"ratio tessera {ours[1]} / pytorch {theirs[1]}: {median[ours] / median[theirs]:.2f}")

if __name__ == "__main__":
    main()
