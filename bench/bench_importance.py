#!/usr/bin/env python3
"""bench_importance.py - make bench-importance: `jizhi study importance`
(Sobol indices of a GP's mean, schedulers/importance.c, through the C
driver build/bin/bench_bo) against Optuna's FanovaImportanceEvaluator (a
random forest and fANOVA) on the same trials, and both against the true
first-order Sobol indices of the function (estimated by Monte Carlo on the
function itself with many points, clipped at 0 and normalised to sum to 1,
which is what both report).

Functions (trials drawn uniformly on each parameter's own scale):
  linear5    5a + 3b + 1.5c + 0.5d + 0e on [0,1]^5 (shares 25:9:2.25:0.25:0)
  product3   a b + 0.5 c on [-1,1]^3 (a and b act only together)
  hartmann6  Hartmann-6 on [0,1]^6
  mixed4     a training-like space: lr (log float), batch (log int, no
             effect), optimizer (choice), dropout (float)

For each function and seed it prints the mean absolute error of each
method's importances against the truth, Spearman's rank correlation with
the truth, and the rank correlation of jizhi with Optuna.

    bench/bench_importance.py --driver build/bin/bench_bo [--seeds 5] [--trials 100]
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_bo import hartmann6  # noqa: E402


def f_linear(p):
    return 5 * p["a"] + 3 * p["b"] + 1.5 * p["c"] + 0.5 * p["d"] + 0 * p["e"]


def f_product(p):
    return p["a"] * p["b"] + 0.5 * p["c"]


def f_hartmann(p):
    return hartmann6([p[f"x{i}"] for i in range(6)])


def f_mixed(p):
    return ((math.log10(p["lr"]) + 2) ** 2 + (0.8 if p["optimizer"] == "sgd" else 0)
            + 0.2 * p["dropout"] + 0 * p["batch"])


def unit_space(names, lo=0.0, hi=1.0):
    return {n: {"type": "float", "low": lo, "high": hi} for n in names}


FUNCS = {
    "linear5": (f_linear, unit_space("abcde")),
    "product3": (f_product, unit_space("abc", -1.0, 1.0)),
    "hartmann6": (f_hartmann, unit_space([f"x{i}" for i in range(6)])),
    "mixed4": (f_mixed, {
        "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
        "batch": {"type": "int", "low": 16, "high": 256, "log": True},
        "optimizer": {"type": "choice", "values": ["sgd", "adam", "lamb"]},
        "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    }),
}


def draw(space, rng):
    """One point, uniform on each parameter's own scale."""
    p = {}
    for n, s in space.items():
        u = rng.random()
        if s["type"] == "choice":
            p[n] = s["values"][min(int(u * len(s["values"])), len(s["values"]) - 1)]
        elif s.get("log"):
            v = math.exp(math.log(s["low"]) + u * (math.log(s["high"]) - math.log(s["low"])))
            p[n] = int(round(v)) if s["type"] == "int" else v
        else:
            v = s["low"] + u * (s["high"] - s["low"])
            p[n] = int(round(v)) if s["type"] == "int" else v
    return p


def true_first_order(f, space, n=20000, seed=12345):
    """Saltelli's estimator on the function itself, clipped and normalised."""
    rng = random.Random(seed)
    names = list(space)
    A = [draw(space, rng) for _ in range(n)]
    B = [draw(space, rng) for _ in range(n)]
    fA = [f(p) for p in A]
    fB = [f(p) for p in B]
    mean = statistics.fmean(fA + fB)
    # centred values: the same estimator with much less Monte Carlo noise
    fA = [v - mean for v in fA]
    fB = [v - mean for v in fB]
    V = statistics.fmean([v * v for v in fA + fB])
    out = {}
    for k in names:
        s = 0.0
        for a, b, fa, fb in zip(A, B, fA, fB):
            ab = dict(a)
            ab[k] = b[k]
            s += fb * (f(ab) - mean - fa)
        out[k] = max(s / n / V, 0.0)
    tot = sum(out.values())
    return {k: v / tot for k, v in out.items()}


def optuna_importance(space, trials, seed):
    import optuna
    from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                      IntDistribution)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {}
    for n, s in space.items():
        if s["type"] == "choice":
            dists[n] = CategoricalDistribution(s["values"])
        elif s["type"] == "int":
            dists[n] = IntDistribution(s["low"], s["high"], log=s.get("log", False))
        else:
            dists[n] = FloatDistribution(s["low"], s["high"], log=s.get("log", False))
    study = optuna.create_study()
    study.add_trials([optuna.trial.create_trial(params=t["params"], distributions=dists,
                                                value=t["value"]) for t in trials])
    ev = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    return dict(optuna.importance.get_param_importances(study, evaluator=ev, normalize=True))


def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", default=os.environ.get("BENCH_BO", "build/bin/bench_bo"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--funcs", default=",".join(FUNCS))
    a = ap.parse_args()
    try:
        import optuna  # noqa: F401
        import sklearn  # noqa: F401
        have_optuna = True
    except Exception:
        have_optuna = False
        print("bench-importance: Optuna's fANOVA skipped: optuna or scikit-learn not "
              "installed (bench/bo.sh installs them)")
    print(f"bench-importance: {a.trials} random trials x {a.seeds} seeds per function; "
          "MAE = mean |importance - truth| over the parameters, rho = Spearman rank "
          "correlation")
    hdr = ("function".ljust(11) + "jizhi MAE".rjust(10) + "jizhi rho".rjust(10) +
           "fANOVA MAE".rjust(11) + "fANOVA rho".rjust(11) + "rho(j,o)".rjust(10))
    print(hdr)
    summary = []
    for name in a.funcs.split(","):
        f, space = FUNCS[name]
        truth = true_first_order(f, space)
        names = list(space)
        tv = [truth[k] for k in names]
        rows = []
        for seed in range(a.seeds):
            rng = random.Random(1000 + seed)
            trials = []
            for _ in range(a.trials):
                p = draw(space, rng)
                trials.append({"params": p, "value": f(p)})
            out = subprocess.run([a.driver, "importance"], input=json.dumps(
                {"space": space, "trials": trials}), capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"bench-importance: {a.driver}: {out.stderr.strip()}")
            j = json.loads(out.stdout)
            jv = [j[k] for k in names]
            r = {"jmae": statistics.fmean(abs(x - y) for x, y in zip(jv, tv)),
                 "jrho": spearman(jv, tv)}
            if have_optuna:
                o = optuna_importance(space, trials, seed)
                ov = [o.get(k, 0.0) for k in names]
                r["omae"] = statistics.fmean(abs(x - y) for x, y in zip(ov, tv))
                r["orho"] = spearman(ov, tv)
                r["jo"] = spearman(jv, ov)
            rows.append(r)

        def m(key):
            v = [r[key] for r in rows if key in r]
            return f"{statistics.fmean(v):.3f}" if v else "-"
        print(name.ljust(11) + m("jmae").rjust(10) + m("jrho").rjust(10) + m("omae").rjust(11) +
              m("orho").rjust(11) + m("jo").rjust(10))
        print("  truth: " + ", ".join(f"{k} {truth[k]:.3f}" for k in names))
        summary.append(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
