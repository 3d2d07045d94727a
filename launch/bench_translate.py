#!/usr/bin/env python3
"""Decoding throughput of `tessera translate` beside CTranslate2 on the same weights.

Times Tessera (1 process x N threads, and `mpirun -np 2` x 1 thread) and, where the Python package
ctranslate2 is installed (it is no dependency of the build or the tests), converts the same HDF5
checkpoint (h5py, the SentencePiece model it holds) with CTranslate2's Transformer spec API, decodes
with the same beam (1 translator x N threads, 2 translators x 1 thread), compares the outputs line by
line and prints sentences/s and ratios. The runs are interleaved, `--repeats` times, and the best of
each is kept: the machine may be shared.

Length penalty: Tessera ranks by log p / ((5 + len) / 6)^alpha (GNMT); CTranslate2 by
log p / len^alpha. Only alpha = 0 (no normalization) is the same search in both, so it is the default.

  python3 launch/bench_translate.py --checkpoint run/checkpoint_best.h5 \
      --input test_2016_flickr.en --tessera build/tessera --beam 4

With --baseline OTHER_BUILD/tessera, that build runs too, interleaved with the others in the same
layouts: the speed-up of a change, and whether its translations are the baseline's line by line.
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="Tessera HDF5 checkpoint")
    p.add_argument("--input", required=True, help="source sentences, one a line")
    p.add_argument("--tessera", default="build/tessera", help="the tessera binary")
    p.add_argument("--baseline", default="", help="another tessera binary (e.g. main's build) timed beside it")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.0, help="alpha; only 0 matches CTranslate2's formula")
    p.add_argument("--threads", type=int, default=2, help="threads of the one-process runs")
    p.add_argument("--batch", type=int, default=64, help="sentences decoded together")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the best time of each is kept")
    p.add_argument("--no-mpi", action="store_true", help="skip the mpirun -np 2 run")
    p.add_argument("--workdir", default="", help="where outputs and the converted model go (default: a temp dir)")
    return p.parse_args()


def run_tessera(args, out, mpi, binary=None):
    """Seconds of decoding `tessera translate` reports (model loading excluded), and its output file."""
    cmd = [binary or args.tessera, "translate", "--checkpoint", args.checkpoint, "-i", args.input, "-o", out,
           "--beam", str(args.beam), "--length-penalty", str(args.length_penalty), "--batch", str(args.batch)]
    env = dict(os.environ, OMP_NUM_THREADS="1" if mpi else str(args.threads))
    if mpi:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", "-x", "OMP_NUM_THREADS"] + cmd
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"bench_translate: {' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    m = re.search(r"translate: (\d+) sentences in ([0-9.]+)s", res.stderr + res.stdout)
    if not m:
        sys.exit(f"bench_translate: no timing line in the output of {' '.join(cmd)}")
    return float(m.group(2))


def checkpoint_config(h5):
    """model.* of the YAML config the checkpoint holds (flat keys: layers, heads, norm, ...)."""
    text = h5.attrs["config"].decode()
    model, section = {}, None
    for line in text.splitlines():
        if not line.startswith(" "):
            section = line.rstrip(":")
        elif section == "model":
            key, _, value = line.strip().partition(":")
            model[key] = value.split("#")[0].strip()
    return model


def sinusoids(length, d):
    """Tessera's positional table: interleaved sin (even) and cos (odd) columns."""
    import numpy as np
    pos = np.arange(length)[:, None].astype(np.float64)
    i = np.arange(d // 2)[None, :].astype(np.float64)
    angle = pos / np.power(10000.0, 2.0 * i / d)
    table = np.zeros((length, d), dtype=np.float64)
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table.astype(np.float32)


def convert(checkpoint, workdir):
    """The checkpoint as a CTranslate2 model directory and its SentencePiece model's path."""
    import h5py
    import numpy as np
    import sentencepiece as spm
    from ctranslate2.specs import common_spec, transformer_spec
    h5 = h5py.File(checkpoint, "r")
    cfg = checkpoint_config(h5)
    if "joint" not in h5["vocab"]:
        sys.exit("bench_translate: only joint-vocabulary checkpoints are converted")
    sp_path = os.path.join(workdir, "vocab.model")
    with open(sp_path, "wb") as f:
        f.write(bytes(h5["vocab/joint"][()]))
    w = {k: np.asarray(v[()]) for k, v in h5["model"].items()}
    layers, heads, d = int(cfg["layers"]), int(cfg["heads"]), int(cfg["d_model"])
    spec = transformer_spec.TransformerSpec.from_config(layers, heads, pre_norm=cfg.get("norm") == "pre")

    def linear(s, name):
        s.weight, s.bias = w[name + ".weight"], w[name + ".bias"]

    def norm(s, name):
        s.gamma, s.beta = w[name + ".weight"], w[name + ".bias"]

    def attention(s, name, self_attention):
        fused = common_spec.LinearSpec()
        parts = ["q", "k", "v"] if self_attention else ["k", "v"]
        fused.weight = np.concatenate([w[f"{name}.{p}_proj.weight"] for p in parts])
        fused.bias = np.concatenate([w[f"{name}.{p}_proj.bias"] for p in parts])
        if self_attention:
            s.linear[0] = fused
        else:
            linear(s.linear[0], name + ".q_proj")
            s.linear[1] = fused
        linear(s.linear[-1], name + ".out_proj")

    def ffn(s, prefix):
        linear(s.linear_0, prefix + ".fc1")
        linear(s.linear_1, prefix + ".fc2")
        norm(s.layer_norm, prefix + ".final_layer_norm")

    src_embed = w.get("embed_tokens.weight", w.get("encoder.embed_tokens.weight"))
    tgt_embed = w.get("embed_tokens.weight", w.get("decoder.embed_tokens.weight"))
    table = sinusoids(int(cfg.get("max_positions", 1024)), d)
    for side, embed in ((spec.encoder, src_embed), (spec.decoder, tgt_embed)):
        (side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings).weight = embed
        side.scale_embeddings = True  # Tessera multiplies embeddings by sqrt(d_model)
        side.position_encodings.encodings = table
    for i, s in enumerate(spec.encoder.layer):
        attention(s.self_attention, f"encoder.layers.{i}.self_attn", True)
        norm(s.self_attention.layer_norm, f"encoder.layers.{i}.self_attn_layer_norm")
        ffn(s.ffn, f"encoder.layers.{i}")
    for i, s in enumerate(spec.decoder.layer):
        attention(s.self_attention, f"decoder.layers.{i}.self_attn", True)
        norm(s.self_attention.layer_norm, f"decoder.layers.{i}.self_attn_layer_norm")
        attention(s.attention, f"decoder.layers.{i}.encoder_attn", False)
        norm(s.attention.layer_norm, f"decoder.layers.{i}.encoder_attn_layer_norm")
        ffn(s.ffn, f"decoder.layers.{i}")
    if cfg.get("norm") == "pre":
        norm(spec.encoder.layer_norm, "encoder.layer_norm")
        norm(spec.decoder.layer_norm, "decoder.layer_norm")
    spec.decoder.projection.weight = w.get("decoder.output_projection.weight", tgt_embed)
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    vocab = ["<blank>" if sp.id_to_piece(i) == "<pad>" else sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.config.add_source_eos = True  # Tessera's sources end with eos
    spec.config.layer_norm_epsilon = 1e-5
    out = os.path.join(workdir, "ct2")
    shutil.rmtree(out, ignore_errors=True)
    spec.validate()
    spec.optimize(quantization=None)
    os.makedirs(out)
    spec.save(out)
    return out, sp_path


def run_ct2(model_dir, sp, sources, args, translators, threads):
    """Seconds to translate `sources` (pieces) and the detokenized outputs."""
    import ctranslate2
    tr = ctranslate2.Translator(model_dir, device="cpu", inter_threads=translators, intra_threads=threads)
    max_len = max(len(s) for s in sources) + 1 + 50
    t0 = time.perf_counter()
    res = tr.translate_batch(sources, beam_size=args.beam, length_penalty=args.length_penalty,
                             max_batch_size=args.batch, batch_type="examples", max_decoding_length=max_len)
    seconds = time.perf_counter() - t0
    return seconds, [sp.decode(r.hypotheses[0]) for r in res]


def read_lines(path):
    return [line.rstrip("\n") for line in open(path, encoding="utf-8")]


def compare_with_baseline(args, best, workdir, n):
    """The speed-up over the baseline build and the lines its translations share, per layout."""
    layouts = [("1x%d" % args.threads, "tessera.txt", "baseline.txt")]
    if not args.no_mpi:
        layouts.append(("mpirun 2x1", "tessera_mpi.txt", "baseline_mpi.txt"))
    for layout, ours, theirs in layouts:
        same = sum(a == b for a, b in zip(read_lines(os.path.join(workdir, ours)),
                                          read_lines(os.path.join(workdir, theirs))))
        print(f"  tessera {layout} / baseline {layout}: {best['baseline ' + layout] / best['tessera ' + layout]:.2f}x"
              f" the sentences/s; identical lines {same} / {n}")


def main():
    args = parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_translate_")
    os.makedirs(workdir, exist_ok=True)
    n = sum(1 for _ in open(args.input, encoding="utf-8"))
    runs = {"tessera 1x%d" % args.threads: lambda: run_tessera(args, os.path.join(workdir, "tessera.txt"), False)}
    if not args.no_mpi:
        runs["tessera mpirun 2x1"] = lambda: run_tessera(args, os.path.join(workdir, "tessera_mpi.txt"), True)
    if args.baseline:
        runs["baseline 1x%d" % args.threads] = lambda: run_tessera(
            args, os.path.join(workdir, "baseline.txt"), False, args.baseline)
        if not args.no_mpi:
            runs["baseline mpirun 2x1"] = lambda: run_tessera(
                args, os.path.join(workdir, "baseline_mpi.txt"), True, args.baseline)
    ct2_out = None
    try:
        import ctranslate2  # noqa: F401
        import sentencepiece as spm
        model_dir, sp_path = convert(args.checkpoint, workdir)
        sp = spm.SentencePieceProcessor(model_file=sp_path)
        sources = [sp.encode(line.rstrip("\n"), out_type=str) for line in open(args.input, encoding="utf-8")]
        ct2_out = {}

        def ct2(name, translators, threads):
            seconds, out = run_ct2(model_dir, sp, sources, args, translators, threads)
            ct2_out[name] = out
            return seconds
        runs["ctranslate2 1x%d" % args.threads] = lambda: ct2("one", 1, args.threads)
        runs["ctranslate2 2x1"] = lambda: ct2("two", 2, 1)
    except ImportError as e:
        print(f"bench_translate: {e.name} is not installed: Tessera only", file=sys.stderr)
    best = {name: math.inf for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            best[name] = min(best[name], run())
    print(f"{n} sentences, beam {args.beam}, length penalty {args.length_penalty} (best of {args.repeats})")
    for name, seconds in best.items():
        print(f"  {name:22s} {seconds:8.2f} s  {n / seconds:8.1f} sentences/s")
    if args.baseline:
        compare_with_baseline(args, best, workdir, n)
    if ct2_out is not None:
        pairs = [("tessera 1x%d" % args.threads, "ctranslate2 1x%d" % args.threads)]
        if not args.no_mpi:
            pairs.append(("tessera mpirun 2x1", "ctranslate2 2x1"))
        for ours, theirs in pairs:
            print(f"  {ours} / {theirs}: {best[theirs] / best[ours]:.2f}x the sentences/s")
        mine = read_lines(os.path.join(workdir, "tessera.txt"))
        same = sum(a == b for a, b in zip(mine, ct2_out["one"]))
        print(f"  identical lines, Tessera vs CTranslate2: {same} / {n}")
        with open(os.path.join(workdir, "ctranslate2.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(ct2_out["one"]) + "\n")
    print(f"  outputs in {workdir}")


if __name__ == "__main__":
    main()
