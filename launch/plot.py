#!/usr/bin/env python3
"""Draws training runs' curves from their metrics.jsonl files.

Usage: python3 launch/plot.py RUN_DIR [RUN_DIR ...] -o FILE.png|FILE.svg
       python3 launch/plot.py --sweep SCALING.csv [SCALING.csv ...] -o FILE.png|FILE.svg

Runs: one figure, two rows: the top row against the training step, the bottom row against wall
time (elapsed_s, in minutes). Columns: loss (training solid, validation dashed), validation BLEU
and the learning rate. Each run is one colour, labelled by its folder's name.

--sweep: the CSVs launch/scaling_sweep.py writes (one host, several hosts, ...), each one colour
labelled by its folder's name: throughput per layout, speed-up and efficiency against the
process count, and the share of the all-reduce hidden behind backward.
Needs matplotlib (python3 -m pip install matplotlib).
"""
import argparse
import csv
import json
import os
import sys


def read_metrics(run_dir):
    """Returns (train_lines, valid_lines) of one run, each a list of dicts in step order.

    A resume from an earlier checkpoint starts a new history at its step, so lines after that
    step written before the resume are dropped, as the run's checkpoints are.
    """
    path = os.path.join(run_dir, "metrics.jsonl")
    train, valid = [], []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            text = text.strip()
            if not text:
                continue
            try:
                line = json.loads(text)
            except json.JSONDecodeError as e:
                raise SystemExit(f"plot: {path}:{number}: not JSON ({e.msg})")
            if "resumed_from" in line or "started_from_scratch" in line:
                step = line.get("step", 0)
                train = [t for t in train if t["step"] <= step]
                valid = [v for v in valid if v["step"] <= step]
            elif "valid_loss" in line:
                valid.append(line)
            elif "loss" in line:
                train.append(line)
    if not train and not valid:
        raise SystemExit(f"plot: {path}: no training or validation lines")
    return train, valid


def minutes_at(steps, train):
    """Wall time in minutes at each step, read off the training lines (validation lines have
    no elapsed_s of their own: a validation is placed at its step's log line)."""
    known = [(t["step"], t["elapsed_s"]) for t in train if t.get("elapsed_s") is not None]
    out = []
    for s in steps:
        before = [e for k, e in known if k <= s]
        out.append(before[-1] / 60 if before else 0.0)
    return out


def labels_for(run_dirs):
    """The folder's name, or its whole path where two runs share a name."""
    names = [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    return [n if names.count(n) == 1 else os.path.normpath(d) for n, d in zip(names, run_dirs)]


def series(rows, key):
    """(steps, values) of the rows that hold a number for key."""
    kept = [r for r in rows if isinstance(r.get(key), (int, float))]
    return [r["step"] for r in kept], [r[key] for r in kept]


def draw_run(axes, train, valid, label, colour):
    """One run's curves on the 2 x 3 axes."""
    for row, against_time in enumerate((False, True)):
        ax_loss, ax_bleu, ax_lr = axes[row]

        def x_of(steps):
            return minutes_at(steps, train) if against_time else steps

        steps, loss = series(train, "loss")
        ax_loss.plot(x_of(steps), loss, color=colour, label=f"{label} train")
        steps, vloss = series(valid, "valid_loss")
        ax_loss.plot(x_of(steps), vloss, color=colour, linestyle="--", marker="o", markersize=3,
                     label=f"{label} valid")
        steps, bleu = series(valid, "valid_bleu")
        ax_bleu.plot(x_of(steps), bleu, color=colour, marker="o", markersize=3, label=label)
        steps, lr = series(train, "lr")
        ax_lr.plot(x_of(steps), lr, color=colour, label=label)


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot: needs matplotlib: python3 -m pip install matplotlib")
    return plt


def plot(run_dirs, output):
    plt = pyplot()
    runs = [read_metrics(d) for d in run_dirs]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((train, valid), label) in enumerate(zip(runs, labels_for(run_dirs))):
        draw_run(axes, train, valid, label, colours[i % len(colours)])
    titles = ("loss (train solid, validation dashed)", "validation BLEU", "learning rate")
    for row, xlabel in enumerate(("step", "wall time (minutes)")):
        for col, title in enumerate(titles):
            ax = axes[row][col]
            ax.set_title(title, fontsize=10)
            ax.set_xlabel(xlabel)
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    axes[0][1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=80)
    print(f"plot: wrote {output}")


def read_sweep(path):
    """The rows of a scaling_sweep.py CSV, numbers as floats (None where a column is empty)."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.append({k: (v if k in ("layout", "baseline") else (float(v) if v != "" else None))
                         for k, v in row.items()})
    if not rows:
        raise SystemExit(f"plot: {path}: no layouts")
    return rows


def draw_sweep(axes, rows, label, colour, offset, width):
    """One sweep on the 4 axes: throughput bars per layout, speed-up and efficiency lines, hidden share."""
    ax_tps, ax_speed, ax_eff, ax_hidden = axes
    xs = [i + offset for i in range(len(rows))]
    ax_tps.bar(xs, [r["tokens_per_s"] for r in rows], width, color=colour, label=label)
    procs = [r["processes"] for r in rows]
    ax_speed.plot(procs, [r["speedup"] for r in rows], "o", color=colour, label=label)
    ax_eff.plot(procs, [100 * r["efficiency"] for r in rows], "o", color=colour, label=label)
    hidden = [(x, 100 * r["hidden_share"]) for x, r in zip(xs, rows) if r["hidden_share"] is not None]
    if hidden:
        ax_hidden.bar([x for x, _ in hidden], [h for _, h in hidden], width, color=colour, label=label)


def plot_sweep(csv_paths, output):
    plt = pyplot()
    sweeps = [read_sweep(p) for p in csv_paths]
    labels = labels_for([os.path.dirname(os.path.abspath(p)) for p in csv_paths])
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(sweeps)
    for i, (rows, label) in enumerate(zip(sweeps, labels)):
        draw_sweep(axes, rows, label, colours[i % len(colours)], (i - (len(sweeps) - 1) / 2) * width, width)
    layouts = sweeps[0]
    most = max(r["processes"] for rows in sweeps for r in rows)
    axes[1].plot([1, most], [1, most], color="grey", linestyle=":", label="linear")
    axes[2].axhline(100, color="grey", linestyle=":")
    for ax, title in zip(axes, ("target tokens/s per layout (tp x dp)", "speed-up vs processes",
                                "efficiency % vs processes", "all-reduce hidden by overlap %")):
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    for ax in (axes[0], axes[3]):
        ax.set_xticks(range(len(layouts)), [r["layout"] for r in layouts])
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=80)
    print(f"plot: wrote {output}")


def main(argv):
    parser = argparse.ArgumentParser(description="Plot training runs' curves, or scaling sweeps.")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR|CSV",
                        help="a train output.dir holding metrics.jsonl; with --sweep, a scaling.csv")
    parser.add_argument("--sweep", action="store_true", help="the inputs are scaling_sweep.py CSVs")
    parser.add_argument("-o", "--output", required=True, help="the figure to write: .png or .svg")
    args = parser.parse_args(argv)
    if os.path.splitext(args.output)[1].lower() not in (".png", ".svg"):
        parser.error(f"-o {args.output}: give a .png or .svg file")
    if args.sweep:
        for p in args.runs:
            if not os.path.isfile(p):
                parser.error(f"{p}: no such CSV")
        plot_sweep(args.runs, args.output)
        return
    for d in args.runs:
        if not os.path.isfile(os.path.join(d, "metrics.jsonl")):
            parser.error(f"{d}: no metrics.jsonl (not a train output.dir?)")
    plot(args.runs, args.output)


if __name__ == "__main__":
    main(sys.argv[1:])
