#!/usr/bin/env python3
"""Scaling experiment: `tessera train` over process counts and tensor x data layouts.

For each layout it runs a short training under mpirun, reads the run's metrics.jsonl and records
throughput (target tokens/s, averaged over the log lines after the first), the speed-up and
scaling efficiency against one process (or the layout of fewest processes in the sweep), and for data-parallel layouts the all-reduce time per step
waited after backward, with and without overlap (parallel.overlap), from which the share of
all-reduce time hidden behind backward follows (a barrier after backward, parallel.measure_comm,
keeps load imbalance between replicas out of that wait). Writes scaling.csv and, drawn by
launch/plot.py --sweep, scaling.png (several sweeps in one figure: plot.py --sweep A.csv B.csv).

  launch/scaling_sweep.py --tessera build/tessera --config configs/reverse.yaml \\
      --layouts 1x1 1x2 2x1 2x2 --steps 60 --threads 1 --out sweep
  # across machines: --mpirun-args "--hostfile hosts --map-by ppr:8:node"
"""
import argparse
import csv
import json
import os
import shlex
import subprocess
import sys


def run(args, tp, dp, overlap, out_dir, measure=False):
    run_dir = os.path.join(out_dir, f"tp{tp}_dp{dp}_{'overlap' if overlap else 'serial'}{'_measured' if measure else ''}")
    cmd = [args.tessera, "train", "--config", args.config,
           "--set", f"output.dir={run_dir}", "--set", f"train.max_steps={args.steps}",
           "--set", f"train.log_every={args.log_every}", "--set", "train.valid_every=0",
           "--set", "checkpoint.keep_best=false", "--set", "checkpoint.every=0",
           "--set", f"parallel.tensor={tp}", "--set", f"parallel.data={dp}",
           "--set", f"parallel.overlap={'true' if overlap else 'false'}",
           "--set", f"parallel.measure_comm={'true' if measure else 'false'}"] + args.set
    np = tp * dp
    if np > 1 or args.always_mpirun:
        cmd = [args.mpirun, "-np", str(np)] + args.export_threads + shlex.split(args.mpirun_args) + cmd
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if os.path.exists(run_dir):
        subprocess.run(["rm", "-rf", run_dir], check=True)
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if '"tokens_per_s"' in line]
    if not rows:
        raise RuntimeError("its metrics.jsonl has no log line")
    steady = rows[1:] or rows  # the first window includes start-up
    tps = sum(r["tokens_per_s"] for r in steady) / len(steady)
    waits = [r["allreduce_wait_ms"] for r in steady if r.get("allreduce_wait_ms") is not None]
    return tps, (sum(waits) / len(waits) if waits else None)


def draw_figure(out_dir):
    """scaling.png beside the CSV, drawn by plot.py's --sweep; without matplotlib, the CSV alone."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("scaling_sweep: no matplotlib (python3 -m pip install matplotlib): no figure", file=sys.stderr)
        return None
    import plot
    figure = os.path.join(out_dir, "scaling.png")
    plot.plot_sweep([os.path.join(out_dir, "scaling.csv")], figure)
    return figure


def export_threads(mpirun):
    """Open MPI's option that passes OMP_NUM_THREADS to ranks on other machines (they do not inherit
    the local environment); none for other launchers, whose options differ."""
    try:
        version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return []
    return ["-x", "OMP_NUM_THREADS"] if "Open MPI" in version else []


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number")
    return int(text)


def layout(text):
    """'TPxDP' -> (tp, dp), each at least 1."""
    parts = text.split("x")
    if len(parts) != 2 or not all(v.isdigit() and int(v) > 0 for v in parts):
        raise argparse.ArgumentTypeError(f"'{text}' is not a layout TPxDP of positive numbers, e.g. 1x2")
    return int(parts[0]), int(parts[1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tessera", default="build/tessera")
    p.add_argument("--config", default="configs/reverse.yaml")
    p.add_argument("--layouts", nargs="+", type=layout, default=[(1, 1), (1, 2)],
                   help="TPxDP, e.g. 1x1 1x2 2x2; speed-up and efficiency are against the layout of fewest processes")
    p.add_argument("--steps", type=positive, default=60)
    p.add_argument("--log-every", type=positive, default=10,
                   help="the log lines after the first are averaged (the first includes start-up)")
    p.add_argument("--threads", type=positive, default=1, help="OpenMP threads per rank")
    p.add_argument("--set", action="append", default=[], help="extra --set key=value for every run")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--mpirun-args", default="--oversubscribe")
    p.add_argument("--always-mpirun", action="store_true", help="launch 1x1 through mpirun too")
    p.add_argument("--out", default="sweep")
    args = p.parse_args()
    args.set = [x for kv in args.set for x in ("--set", kv)]
    args.export_threads = export_threads(args.mpirun)
    os.makedirs(args.out, exist_ok=True)

    # A layout that fails (heads that do not divide over its tensor-parallel ranks, say) is named
    # and left out; the others are still measured and written.
    results, failed = [], []
    for tp, dp in args.layouts:
        try:
            tps, _ = run(args, tp, dp, True, args.out)
            row = {"layout": f"{tp}x{dp}", "processes": tp * dp, "tensor": tp, "data": dp, "tokens_per_s": tps,
                   "allreduce_wait_ms": None, "allreduce_serial_ms": None, "hidden_share": None}
            if dp > 1:  # the all-reduce wait with and without overlap, load imbalance kept out by a barrier
                _, wait = run(args, tp, dp, True, args.out, measure=True)
                _, serial = run(args, tp, dp, False, args.out, measure=True)
                row["allreduce_wait_ms"], row["allreduce_serial_ms"] = wait, serial
                if serial:
                    row["hidden_share"] = max(0.0, 1.0 - wait / serial)
        except Exception as e:  # a failed run, or metrics it could not read (a cut line, say)
            why = f"exit status {e.returncode}" if isinstance(e, subprocess.CalledProcessError) else str(e)
            print(f"scaling_sweep: layout {tp}x{dp} failed ({why}); left out", file=sys.stderr, flush=True)
            failed.append(f"{tp}x{dp}")
            continue
        results.append(row)
    if not results:
        print(f"scaling_sweep: every layout failed ({' '.join(failed)}): nothing written", file=sys.stderr)
        return 1
    # The baseline is the layout of fewest processes (the first of them): one process where the sweep
    # has it. Efficiency is the speed-up divided by the ratio of process counts: 100% is linear scaling.
    base = min(results, key=lambda r: r["processes"])
    for r in results:
        r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"]
        r["efficiency"] = r["speedup"] * base["processes"] / r["processes"]
        r["baseline"] = base["layout"]
    with open(os.path.join(args.out, "scaling.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0].keys()))
        writer.writeheader()
        writer.writerows(results)
    figure = draw_figure(args.out)
    for r in results:
        hidden = f"{100 * r['hidden_share']:.0f}%" if r["hidden_share"] is not None else "-"
        print(f"{r['layout']:>5}  {r['tokens_per_s']:9.0f} tok/s  speed-up {r['speedup']:.2f}  "
              f"efficiency {100 * r['efficiency']:5.1f}%  all-reduce hidden {hidden}")
    if base["processes"] > 1:
        print(f"note: no one-process layout in the sweep: speed-up and efficiency are against {base['layout']} "
              f"({base['processes']} processes)")
    print(f"wrote {args.out}/scaling.csv" + (f" and {figure}" if figure else ""))
    if failed:
        print(f"scaling_sweep: {len(failed)} layout(s) failed and are not in them: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
