#!/usr/bin/env python3
"""bo_large.py - make bench-bo-large: bo past 1 000 finished trials (issue 43).

For each function and seed, the C driver (`bench_bo large`) builds one
history of HIST evaluated points (jizhi's tpe with that seed for the first
1 000, then uniform random points up to HIST) and tells it to a fresh
scheduler of each method, which then makes K more suggestions, each
evaluated and told before the next. Prints, per function, history size and
method, the median over seeds of the best-so-far regret after K/2 and K
suggestions, the median history regret (where every method starts), how
many seeds each method ended best (ties shared), and the suggestion
latency (median of the per-run medians, and the slowest suggestion of any
run). Every line of the driver goes to --out as JSON.

    bench/bo_large.py --driver build/bin/bench_bo [--funcs ackley5,styblinski4,levy8]
        [--hist 5000] [--k 50] [--seeds 5] [--seed0 1] [--jobs 3]
        [--methods 'bo;tpe;cmaes;bo{"large_n":5000}'] [--out FILE]

The defaults are the run docs/bench.md reports (about 17 minutes on the
2-core machine at load 14-28).

--methods is a ';'-separated list of the driver's METHODs (TYPE{json
options}); the default is each option the issue asked to compare. Runs go
in parallel, one driver process per (function, history size), --jobs at a
time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# the options docs/bench.md compares (2026-12-06); the exact GP is
# 'bo{"large_n":5000}' (--hist 1000: about 0.4-0.5 s a suggestion; at
# 5 000, about 8 s)
DEFAULT_METHODS = ";".join(
    [
        "bo",  # the default: best 500 + random 500 past 1 000
        'bo{"large_first":0.8}',  # best 800 + random 200
        'bo{"large_subset":"nearest","large_first":1}',  # nearest 1 000
        "tpe",
        "cmaes",  # warm start: its first mean at the history's best
    ]
)


def run_one(driver, func, hist, k, seed0, seeds, methods):
    cmd = [driver, "large", func, str(hist), str(k), str(seed0), str(seeds)] + methods
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"bo_large: {' '.join(cmd)} failed ({out.returncode})")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", default="build/bin/bench_bo")
    ap.add_argument("--funcs", default="ackley5,styblinski4,levy8")
    ap.add_argument("--hist", default="5000")
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed0", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--out", default="build/bench/bo_large.json")
    a = ap.parse_args()
    methods = [m for m in a.methods.split(";") if m]
    jobs = [(f, int(h)) for h in a.hist.split(",") for f in a.funcs.split(",")]
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futs = [
            ex.submit(run_one, a.driver, f, h, a.k, a.seed0, a.seeds, methods)
            for f, h in jobs
        ]
        rows = [r for fu in futs for r in fu.result()]
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(rows, fh, indent=1)

    print(
        f"bo past 1 000 trials: K = {a.k} suggestions after a history of HIST, "
        f"{a.seeds} seeds (medians)"
    )
    hdr = (
        f"{'func':12} {'hist':>5} {'method':50} {'start':>9} {'K/2':>9} "
        f"{'K':>9} {'wins':>5} {'lat_ms':>8} {'max_ms':>8}"
    )
    print(hdr)
    for f, h in jobs:
        sel = [r for r in rows if r["func"] == f and r["hist"] == h]
        wins = {m: 0.0 for m in methods}
        for s in sorted({r["seed"] for r in sel}):
            rs = [r for r in sel if r["seed"] == s]
            lo = min(r["regret"] for r in rs)
            best = [r["method"] for r in rs if r["regret"] <= lo * (1 + 1e-9) + 1e-12]
            for m in best:
                wins[m] += 1.0 / len(best)
        for m in methods:
            rm = [r for r in sel if r["method"] == m]
            if not rm:
                continue
            med = lambda key: statistics.median(r[key] for r in rm)
            half = statistics.median(r["curve"][len(r["curve"]) // 2 - 1] for r in rm)
            print(
                f"{f:12} {h:5d} {m:50} {med('hist_regret'):9.4g} {half:9.4g} "
                f"{med('regret'):9.4g} {wins[m]:5.1f} {med('lat_med_ms'):8.1f} "
                f"{max(r['lat_max_ms'] for r in rm):8.1f}"
            )
    print(f"(every run: {a.out})")


if __name__ == "__main__":
    main()
