#!/usr/bin/env python3
"""Draws training runs' curves from their metrics.jsonl files.

Usage: python3 launch/plot.py RUN_DIR [RUN_DIR ...] -o FILE.png|FILE.svg

One figure, two rows: the top row against the training step, the bottom row against wall time
(elapsed_s, in minutes). Columns: loss (training solid, validation dashed), validation BLEU and
the learning rate. Each run is one colour, labelled by its folder's name. Needs matplotlib
(python3 -m pip install matplotlib).
"""
import argparse
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


def plot(run_dirs, output):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot: needs matplotlib: python3 -m pip install matplotlib")
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


def main(argv):
    parser = argparse.ArgumentParser(description="Plot loss, BLEU and learning rate of training runs.")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a train output.dir holding metrics.jsonl")
    parser.add_argument("-o", "--output", required=True, help="the figure to write: .png or .svg")
    args = parser.parse_args(argv)
    if os.path.splitext(args.output)[1].lower() not in (".png", ".svg"):
        parser.error(f"-o {args.output}: give a .png or .svg file")
    for d in args.runs:
        if not os.path.isfile(os.path.join(d, "metrics.jsonl")):
            parser.error(f"{d}: no metrics.jsonl (not a train output.dir?)")
    plot(args.runs, args.output)


if __name__ == "__main__":
    main(sys.argv[1:])
