#!/usr/bin/env python3
"""bench_mo.py - multi-objective and constrained search: jizhi bo (driven
without processes by the C driver, build/bin/bench_mo) against Optuna's
NSGA-II and multi-objective TPE, and Optuna's TPE with constraints_func,
on the same functions (checked through the driver's `eval` mode).

Multi-objective: ZDT1, ZDT2 (6 parameters, 2 objectives; reference point
(11, 11)) and DTLZ2 (6 parameters, 3 objectives; reference (1.1, 1.1,
1.1)). Score: hypervolume of the evaluated points after 50 and 100
evaluations (higher is better), computed here by one exact routine for
every method. The true fronts' hypervolumes: ZDT1 121 - 1/3 = 120.667,
ZDT2 121 - 2/3 = 120.333, DTLZ2 1.331 - pi/6 = 0.807. Constrained: Branin with a disk constraint ((x0-2.5)^2 +
(x1-7.5)^2 <= 50; optimum 0.397887) and Gardner's problem (min
cos(2x0)cos(x1)+sin(x0) s.t. cos(x0+x1) <= 0.5 on [0,6]^2). Score: best
feasible value after 50 and 100 evaluations (lower is better), and the
share of evaluations that were feasible; bo runs with both constraint
models (probability of feasibility, the default, and the penalty).

Optuna is installed into the system Python for this benchmark only
(pinned as bench/bo.sh explains); without it the peers' rows are
skipped with the reason.

  bench/bench_mo.py --driver build/bin/bench_mo [--seeds 10] [--quick]
"""
import argparse
import warnings
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

MO = {"zdt1": (6, 2, [11.0, 11.0]), "zdt2": (6, 2, [11.0, 11.0]),
      "dtlz2": (6, 3, [1.1, 1.1, 1.1])}
CON = {"branin_disk": (2, [(-5, 10), (0, 15)], 50.0, 0.397887),
       "gardner": (2, [(0, 6), (0, 6)], 0.5, None)}


# bo's other constraint model (the default is probability of feasibility)
PENALTY = 'bo:{"constraint_model":"penalty"}'


def f_py(name, x):
    """The same functions in Python, for the peers (checked against the driver)."""
    d = len(x)
    if name in ("zdt1", "zdt2"):
        g = 1 + 9 * sum(x[1:]) / (d - 1)
        f2 = g * (1 - math.sqrt(x[0] / g)) if name == "zdt1" else g * (1 - (x[0] / g) ** 2)
        return [x[0], f2], None
    if name == "dtlz2":
        g = sum((xi - 0.5) ** 2 for xi in x[2:])
        a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
        return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b),
                (1 + g) * math.sin(a)], None
    if name == "branin_disk":
        b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
        u = x[1] - b * x[0] ** 2 + c * x[0] - 6
        return [u * u + 10 * (1 - t) * math.cos(x[0]) + 10], \
            (x[0] - 2.5) ** 2 + (x[1] - 7.5) ** 2
    if name == "gardner":
        return [math.cos(2 * x[0]) * math.cos(x[1]) + math.sin(x[0])], \
            math.cos(x[0]) * math.cos(x[1]) - math.sin(x[0]) * math.sin(x[1])
    raise ValueError(name)


def hypervolume(F, ref):
    """Exact hypervolume of the points F (minimisation) below ref, by slicing."""
    pts = [list(p) for p in F if all(a < r for a, r in zip(p, ref))]
    return _hv(pts, list(ref))


def _hv(pts, ref):
    if not pts:
        return 0.0
    m = len(ref)
    if m == 1:
        return ref[0] - min(p[0] for p in pts)
    if m == 2:
        pts = sorted(pts, key=lambda p: p[1])
        hv, best0 = 0.0, ref[0]
        for i, p in enumerate(pts):
            nxt = pts[i + 1][1] if i + 1 < len(pts) else ref[1]
            best0 = min(best0, p[0])
            hv += (ref[0] - best0) * (nxt - p[1])
        return hv
    pts = sorted(pts, key=lambda p: p[-1])
    hv = 0.0
    for i, p in enumerate(pts):
        top = pts[i + 1][-1] if i + 1 < len(pts) else ref[-1]
        if top > p[-1]:
            hv += _hv([q[:-1] for q in pts[:i + 1]], ref[:-1]) * (top - p[-1])
    return hv


def run_driver(driver, func, method, evals, seed0, nseeds):
    p = subprocess.run([driver, "run", func, method, str(evals), str(seed0), str(nseeds)],
                       capture_output=True, text=True, check=True)
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def check_eval(driver):
    rnd = random.Random(7)
    for name in list(MO) + list(CON):
        d = MO[name][0] if name in MO else CON[name][0]
        bounds = [(0, 1)] * d if name in MO else CON[name][1]
        for _ in range(3):
            x = [rnd.uniform(lo, hi) for lo, hi in bounds]
            out = subprocess.run([driver, "eval", name] + ["%.17g" % v for v in x],
                                 capture_output=True, text=True, check=True).stdout.split()
            f, g = f_py(name, x)
            want = f + ([g] if g is not None else [])
            got = [float(v) for v in out]
            assert all(abs(a - b) <= 1e-9 * max(1, abs(b)) for a, b in zip(got, want)), \
                (name, got, want)


def optuna_run(func, sampler_name, evals, seed):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if func in MO:
        d, m, _ = MO[func]
        bounds = [(0.0, 1.0)] * d
        constraints = None
    else:
        d, bounds, bound, _ = CON[func]
        m = 1
        constraints = lambda t: [t.user_attrs["g"] - bound]  # noqa: E731
    if sampler_name == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed, constraints_func=constraints)
    elif sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed, constraints_func=constraints)
    elif sampler_name == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        raise ValueError(sampler_name)
    study = optuna.create_study(directions=["minimize"] * m, sampler=sampler)
    F, C = [], []

    def objective(trial):
        x = [trial.suggest_float("x%d" % i, lo, hi) for i, (lo, hi) in enumerate(bounds)]
        f, g = f_py(func, x)
        F.append(f)
        if g is not None:
            C.append(g)
            trial.set_user_attr("g", g)
        return f if m > 1 else f[0]

    t0 = time.time()
    study.optimize(objective, n_trials=evals)
    out = {"func": func, "method": "optuna-" + sampler_name, "seed": seed, "F": F,
           "seconds": time.time() - t0}
    if C:
        out["c"], out["bound"] = C, CON[func][2]
    return out


def score(run, k):
    F = run["F"][:k]
    if run["func"] in MO:
        return hypervolume(F, MO[run["func"]][2])
    c = run["c"][:k]
    feas = [f[0] for f, g in zip(F, c) if g <= run["bound"]]
    return min(feas) if feas else float("inf")


def feasible_share(run, k):
    c = run["c"][:k]
    return sum(g <= run["bound"] for g in c) / len(c)


def fmt(xs):
    xs = [x for x in xs]
    if any(math.isinf(x) for x in xs):
        return "inf in %d" % sum(math.isinf(x) for x in xs)
    med = statistics.median(xs)
    return "%.4g (%.3g)" % (med, statistics.pstdev(xs) if len(xs) > 1 else 0)


def print_table(results, func, a, seeds):
    ks = [k for k in (50, 100) if k <= a.evals]
    if True:
        rows = {}
        for r in results:
            if r["func"] == func:
                rows.setdefault(r["method"], []).append(r)
        if func in MO:
            print("\n%s: hypervolume, higher is better (ref %s)" % (func, MO[func][2]))
        else:
            print("\n%s: best feasible value, lower is better%s; feasible share"
                  % (func, " (optimum %.6g)" % CON[func][3] if CON[func][3] else ""))
        print("  %-22s" % "method" + "".join("%24s" % ("@%d" % k) for k in ks) + "%10s" % "s/seed")
        peer_best = {}
        for meth, rs in rows.items():
            line = "  %-22s" % ("jizhi " + meth if not meth.startswith("optuna") else meth)
            for k in ks:
                sc = [score(r, k) for r in rs]
                cell = fmt(sc)
                if func in CON:
                    cell += " %.0f%%" % (100 * statistics.mean(feasible_share(r, k) for r in rs))
                line += "%24s" % cell
                if meth.startswith("optuna"):
                    med = statistics.median(sc)
                    better = (lambda x, y: x > y) if func in MO else (lambda x, y: x < y)
                    if k not in peer_best or better(med, peer_best[k]):
                        peer_best[k] = med
            line += "%10.2f" % statistics.mean(r["seconds"] for r in rs)
            print(line)
        if peer_best:
            for meth in a.bo_methods.split(",") + ([PENALTY] if func in CON else []):
                if meth not in rows:
                    continue
                parts = []
                for k in ks:
                    med = statistics.median(score(r, k) for r in rows[meth])
                    pb = peer_best[k]
                    if func in MO:
                        parts.append("@%d jizhi/optuna-best %.3f" % (k, med / pb if pb else float("nan")))
                    else:
                        parts.append("@%d jizhi %.4g vs optuna-best %.4g" % (k, med, pb))
                print("  %s: %s" % (meth, "; ".join(parts)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--evals", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="3 seeds")
    ap.add_argument("--funcs", default=",".join(list(MO) + list(CON)))
    ap.add_argument("--bo-methods", default="bo",
                    help="comma-separated driver methods (bo, random, bo:{json})")
    ap.add_argument("--out")
    a = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*constraints_func.*")
    seeds = 3 if a.quick else a.seeds
    check_eval(a.driver)
    try:
        import optuna
        peers = ["nsga2", "tpe"]
        print("optuna %s" % optuna.__version__)
    except ImportError as e:
        peers = []
        print("SKIPPED the Optuna rows: optuna is not installed (%s); install with "
              "/usr/bin/python3 -m pip install --break-system-packages 'optuna<4.1'" % e)
    funcs = a.funcs.split(",")
    results = []
    for func in funcs:
        methods = a.bo_methods.split(",") + ["random"]
        if func in CON and PENALTY not in methods:
            methods.insert(1, PENALTY)  # the other constraint model, for comparison
        for meth in methods:
            results += run_driver(a.driver, func, meth, a.evals, 0, seeds)
        for p in peers:
            if func in CON and p == "nsga2":
                continue  # single objective: TPE with constraints_func is the peer
            results += [optuna_run(func, p, a.evals, s) for s in range(seeds)]
        print("\n%d seeds; median (sd) over seeds" % seeds)
        print_table(results, func, a, seeds)
        sys.stdout.flush()
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    sys.exit(main())
