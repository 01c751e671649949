#!/usr/bin/env python3
"""bench_bo.py - make bench-bo: jizhi's bo scheduler against its peers.

Runs, in one run, jizhi `bo` and `random` (through the C driver
build/bin/bench_bo) and, where installed, Optuna's TPESampler and GPSampler
and scikit-optimize's gp_minimize (and on request jizhi `tpe` and `cmaes`
against Optuna's TPESampler and CmaEsSampler: --methods), on Branin, Hartmann-6, Ackley-5,
Rosenbrock-4, Levy-4, Styblinski-Tang-4, and (so that changes are not fitted
to those six) Shekel-10, the six-hump camel and Levy-8 (minimisation, standard
domains; `--funcs rugged` for the many-basin set instead: Rastrigin-3 and -5,
Schwefel-3, Michalewicz-5, Shekel-5 and -7, Griewank-5, held out from bo's
tuning), EVALS evaluations x SEEDS seeds each, and prints the median simple
regret (best value found - global minimum) per function and method. Then it
prints the suggestion latency of jizhi bo (and of GPSampler) at n = 100, 500
and 1000 observations in 6 dimensions.

Peers that are not installed are skipped with a note. Regret runs go in
parallel, one thread each; latency runs one at a time with all cores.
Results are also written as JSON (--out).

    bench/bench_bo.py --driver build/bin/bench_bo [--seeds 10] [--seed0 0] [--evals 50]
        [--funcs branin,...] [--methods jizhi-bo,...] [--latency 100,500,1000]
        [--latency-method bo|tpe|cmaes]
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

# ---- test functions (the C driver has the same ones; checked at start) ----


def branin(x):
    a, b, c, r, s, t = 1, 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return a * (x[1] - b * x[0] ** 2 + c * x[0] - r) ** 2 + s * (1 - t) * math.cos(x[0]) + s


_HA = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
       [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
_HP = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
       [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
       [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
       [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]
_HAL = [1.0, 1.2, 3.0, 3.2]


def hartmann6(x):
    return -sum(_HAL[i] * math.exp(-sum(_HA[i][j] * (x[j] - _HP[i][j]) ** 2 for j in range(6)))
                for i in range(4))


def ackley(x):
    d = len(x)
    s1 = sum(v * v for v in x)
    s2 = sum(math.cos(2 * math.pi * v) for v in x)
    return -20 * math.exp(-0.2 * math.sqrt(s1 / d)) - math.exp(s2 / d) + 20 + math.e


def rosenbrock(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def levy(x):
    w = [1 + (v - 1) / 4 for v in x]
    s = math.sin(math.pi * w[0]) ** 2
    for i in range(len(x) - 1):
        s += (w[i] - 1) ** 2 * (1 + 10 * math.sin(math.pi * w[i] + 1) ** 2)
    return s + (w[-1] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[-1]) ** 2)


def styblinski(x):
    return sum(v**4 - 16 * v * v + 5 * v for v in x) / 2


_SB = [1, 2, 2, 4, 4, 6, 3, 7, 5, 5]
_SC = [[4, 1, 8, 6, 3, 2, 5, 8, 6, 7], [4, 1, 8, 6, 7, 9, 3, 1, 2, 3.6],
       [4, 1, 8, 6, 3, 2, 5, 8, 6, 7], [4, 1, 8, 6, 7, 9, 3, 1, 2, 3.6]]


def shekel(x):
    return -sum(1 / (0.1 * _SB[i] + sum((x[j] - _SC[j][i]) ** 2 for j in range(4)))
                for i in range(10))


def sixhump(x):
    a, b = x[0] ** 2, x[1] ** 2
    return (4 - 2.1 * a + a * a / 3) * a + x[0] * x[1] + (-4 + 4 * b) * b


def rastrigin(x):
    return 10 * len(x) + sum(v * v - 10 * math.cos(2 * math.pi * v) for v in x)


def schwefel(x):
    return 418.9829 * len(x) - sum(v * math.sin(math.sqrt(abs(v))) for v in x)


def michalewicz(x):
    return -sum(math.sin(v) * math.sin((i + 1) * v * v / math.pi) ** 20 for i, v in enumerate(x))


def shekel_m(m):
    return lambda x: -sum(1 / (0.1 * _SB[i] + sum((x[j] - _SC[j][i]) ** 2 for j in range(4)))
                          for i in range(m))


def griewank(x):
    p = 1.0
    for i, v in enumerate(x):
        p *= math.cos(v / math.sqrt(i + 1.0))
    return 1 + sum(v * v for v in x) / 4000 - p


FUNCS = {
    "branin": (branin, [(-5, 10), (0, 15)], 0.397887357729738),
    "hartmann6": (hartmann6, [(0, 1)] * 6, -3.32236801141551),
    "ackley5": (ackley, [(-32.768, 32.768)] * 5, 0.0),
    "rosenbrock4": (rosenbrock, [(-5, 10)] * 4, 0.0),
    "levy4": (levy, [(-10, 10)] * 4, 0.0),
    "styblinski4": (styblinski, [(-5, 5)] * 4, -39.16616570377142 * 4),
    # beyond the usual six, so that a change is not fitted to them
    "shekel10": (shekel, [(0, 10)] * 4, -10.53644315348353),
    "sixhump": (sixhump, [(-3, 3), (-2, 2)], -1.0316284534898774),
    "levy8": (levy, [(-10, 10)] * 8, 0.0),
    # rugged, many basins (--funcs rugged): held out, bo was not tuned on them
    "rastrigin3": (rastrigin, [(-5.12, 5.12)] * 3, 0.0),
    "rastrigin5": (rastrigin, [(-5.12, 5.12)] * 5, 0.0),
    # the minimum is at 420.968746 in each coordinate, not quite 0
    "schwefel3": (schwefel, [(-500, 500)] * 3, 3 * (418.9829 - 418.98288727243369)),
    "michalewicz5": (michalewicz, [(0, math.pi)] * 5, -4.687658179),
    "shekel5": (shekel_m(5), [(0, 10)] * 4, -10.1531996790582),
    "shekel7": (shekel_m(7), [(0, 10)] * 4, -10.4029405668187),
    "griewank5": (griewank, [(-600, 600)] * 5, 0.0),
}
# --funcs smooth (the default: the usual six and three more) or rugged
SMOOTH = ["branin", "hartmann6", "ackley5", "rosenbrock4", "levy4", "styblinski4",
          "shekel10", "sixhump", "levy8"]
RUGGED = ["rastrigin3", "rastrigin5", "schwefel3", "michalewicz5", "shekel5", "shekel7",
          "griewank5"]
FUNC_SETS = {"smooth": SMOOTH, "rugged": RUGGED, "all": SMOOTH + RUGGED}

METHODS = ["jizhi-bo", "jizhi-random", "optuna-tpe", "optuna-gp", "skopt-gp",
           "jizhi-tpe", "jizhi-cmaes", "optuna-cmaes"]
# the methods run by default (tpe and cmaes against their Optuna peers:
# --methods jizhi-tpe,optuna-tpe,jizhi-cmaes,optuna-cmaes)
DEFAULT_METHODS = METHODS[:5]
# head-to-head pairs summarised when both are run: jizhi's, Optuna's
PAIRS = [("jizhi-tpe", "optuna-tpe"), ("jizhi-cmaes", "optuna-cmaes")]


def have(module):
    try:
        __import__(module)
        return True
    except Exception:
        return False


def one_thread():
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = "1"


# ---- one regret run (in a worker process) ----


def run_task(task):
    method, func, seed, evals, driver = task
    one_thread()
    f, bounds, fopt = FUNCS[func]
    t0 = time.time()
    if method.startswith("jizhi-"):
        out = subprocess.run([driver, "run", func, method[6:], str(evals), str(seed), "1"],
                             capture_output=True, text=True, env=dict(os.environ))
        if out.returncode != 0:
            raise RuntimeError(f"{driver} {func} {method}: {out.stderr.strip()}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        return method, func, seed, r["regret"], r["seconds"]
    if method.startswith("optuna-"):
        import warnings
        import optuna
        warnings.simplefilter("ignore")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            import torch
            torch.set_num_threads(1)
        except Exception:
            pass
        if method == "optuna-tpe":
            sampler = optuna.samplers.TPESampler(seed=seed)
        elif method == "optuna-cmaes":
            sampler = optuna.samplers.CmaEsSampler(seed=seed)
        else:
            sampler = optuna.samplers.GPSampler(seed=seed)
        study = optuna.create_study(sampler=sampler, direction="minimize")

        def objective(trial):
            return f([trial.suggest_float(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(bounds)])

        study.optimize(objective, n_trials=evals)
        return method, func, seed, study.best_value - fopt, time.time() - t0
    if method == "skopt-gp":
        import warnings
        from skopt import gp_minimize
        warnings.simplefilter("ignore")
        res = gp_minimize(lambda x: f(list(x)), [(float(lo), float(hi)) for lo, hi in bounds],
                          n_calls=evals, random_state=seed)
        return method, func, seed, res.fun - fopt, time.time() - t0
    raise ValueError(method)


# ---- latency ----


def gp_latency(n, repeats):
    """GPSampler: n completed trials of Hartmann-6, then study.ask() timed
    (the sampler fits its GP and optimises the acquisition in ask)."""
    import warnings
    import optuna
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = random.Random(42)
    dists = {f"x{i}": optuna.distributions.FloatDistribution(0, 1) for i in range(6)}
    study = optuna.create_study(sampler=optuna.samplers.GPSampler(seed=1))
    trials = []
    for _ in range(n):
        x = [rng.random() for _ in range(6)]
        trials.append(optuna.trial.create_trial(params={f"x{i}": v for i, v in enumerate(x)},
                                                distributions=dists, value=hartmann6(x)))
    study.add_trials(trials)
    ms = []
    for _ in range(repeats + 1):
        t0 = time.time()
        t = study.ask(dists)
        ms.append(1e3 * (time.time() - t0))
        study.tell(t, hartmann6([t.params[f"x{i}"] for i in range(6)]))
    return {"n": n, "cold_ms": ms[0], "warm_ms": statistics.median(ms[1:]) if repeats else None}


def fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", default=os.environ.get("BENCH_BO", "build/bin/bench_bo"))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed0", type=int, default=0,
                    help="first seed (seeds seed0 .. seed0+seeds-1; more seeds for near ties)")
    ap.add_argument("--evals", type=int, default=50)
    ap.add_argument("--funcs", default="smooth",
                    help="names, or the sets smooth (default), rugged, all")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--latency", default="100,500,1000", help="n values ('' to skip)")
    ap.add_argument("--latency-repeats", type=int, default=3)
    ap.add_argument("--latency-method", default="bo",
                    help="the jizhi scheduler timed (bo, tpe, cmaes); GPSampler is timed beside bo only")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=None, help="JSON results file")
    ap.add_argument("--reuse", default=None,
                    help="JSON results of an earlier run: its runs for methods not run now "
                         "(e.g. the slow peers) join the table")
    ap.add_argument("--gp-latency-only", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.gp_latency_only is not None:
        print(json.dumps(gp_latency(a.gp_latency_only, a.latency_repeats)))
        return 0

    funcs = [g for f in a.funcs.split(",") if f for g in FUNC_SETS.get(f, [f])]
    methods = [m for m in a.methods.split(",") if m]
    for f in funcs:
        if f not in FUNCS:
            sys.exit(f"bench_bo: unknown function {f} (expected {', '.join(FUNCS)}, "
                     f"or a set: {', '.join(FUNC_SETS)})")
    skipped = {}
    if not have("optuna"):
        skipped.update({"optuna-tpe": "optuna not installed", "optuna-gp": "optuna not installed",
                        "optuna-cmaes": "optuna not installed"})
    elif not have("cmaes"):
        skipped["optuna-cmaes"] = "CmaEsSampler needs the cmaes package"
    elif not (have("torch") and have("scipy")):
        skipped["optuna-gp"] = "GPSampler needs torch and scipy"
    if not have("skopt"):
        skipped["skopt-gp"] = "scikit-optimize not installed"
    methods = [m for m in methods if m not in skipped]
    for m, why in skipped.items():
        print(f"bench-bo: skipping {m}: {why} (pip install optuna scikit-optimize)")

    # the driver and this script must agree on the functions
    rng = random.Random(7)
    for name in funcs:
        f, bounds, _ = FUNCS[name]
        for _ in range(3):
            x = [lo + (hi - lo) * rng.random() for lo, hi in bounds]
            out = subprocess.run([a.driver, "eval", name] + [repr(v) for v in x],
                                 capture_output=True, text=True, check=True)
            c, p = float(out.stdout), f(x)
            if abs(c - p) > 1e-9 * max(1, abs(p)):
                sys.exit(f"bench_bo: {name} differs between C ({c}) and Python ({p})")

    tasks = [(m, f, s, a.evals, a.driver) for f in funcs for m in methods
             for s in range(a.seed0, a.seed0 + a.seeds)]
    print(f"bench-bo: {len(tasks)} runs ({len(funcs)} functions x {len(methods)} methods x "
          f"{a.seeds} seeds, {a.evals} evaluations each) on {a.jobs} processes", flush=True)
    res = {}
    secs = {}
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for i, (m, f, s, regret, sec) in enumerate(ex.map(run_task, tasks)):
            res.setdefault((f, m), []).append(regret)
            secs[m] = secs.get(m, 0) + sec
            if (i + 1) % max(1, len(tasks) // 10) == 0:
                print(f"  {i + 1}/{len(tasks)} runs, {time.time() - t0:.0f} s", flush=True)

    if a.reuse:
        with open(a.reuse) as fh:
            old = json.load(fh)
        ran = set(methods)
        for key, v in old.get("regret", {}).items():
            f, m = key.split("/", 1)
            if (f in funcs and m not in ran and len(v) == a.seeds and old.get("evals") == a.evals
                    and old.get("seed0", 0) == a.seed0):
                res[(f, m)] = v
                if m not in methods:
                    methods.append(m)
        print(f"bench-bo: reused runs of {a.reuse} for methods not run now")
        methods.sort(key=lambda m: METHODS.index(m) if m in METHODS else len(METHODS))

    med = {k: statistics.median(v) for k, v in res.items()}
    w = 13
    print()
    print(f"median simple regret over {a.seeds} seeds ({a.seed0}..{a.seed0 + a.seeds - 1}), "
          f"{a.evals} evaluations (lower is better)")
    print("function".ljust(13) + "".join(m.rjust(w) for m in methods) + "   bo vs best(tpe, gp, skopt)")
    wins = 0
    compared = 0
    for f in funcs:
        row = f.ljust(13) + "".join(fmt(med.get((f, m))).rjust(w) for m in methods)
        peers = [med[(f, m)] for m in ("optuna-tpe", "optuna-gp", "skopt-gp") if (f, m) in med]
        if "jizhi-bo" in methods and peers:
            bo, best = med[(f, "jizhi-bo")], min(peers)
            compared += 1
            ok = bo <= best
            wins += ok
            ratio = bo / best if best > 0 else (1.0 if bo == best else math.inf)
            row += f"   {'win ' if ok else 'LOSE'} ({ratio:.2g}x)"
        print(row)
    if compared:
        print(f"jizhi bo no worse than the best of Optuna TPE, GPSampler and gp_minimize on "
              f"{wins} of {compared} functions" +
              (" (goal: >= 5 of the first 6)" if funcs[:6] == SMOOTH[:6] else ""))
    for mine, peer in PAIRS:
        if mine not in methods or peer not in methods:
            continue
        n_ok = n_cmp = 0
        for f in funcs[:6]:
            if (f, mine) in med and (f, peer) in med:
                n_cmp += 1
                n_ok += med[(f, mine)] <= med[(f, peer)]
        print(f"{mine} no worse than {peer} on {n_ok} of {n_cmp} of the first six functions")
    print("total seconds per method (all runs of this run): " +
          ", ".join(f"{m} {secs[m]:.0f}" for m in methods if m in secs))

    lat = []
    ns = [int(v) for v in a.latency.split(",") if v]
    if ns:
        print()
        # tpe and cmaes are timed after n of their own suggestions told in
        # order (latency-told): warm-started, cmaes would keep only the best
        told = a.latency_method.split("{")[0] in ("tpe", "cmaes")
        print(f"suggestion latency of jizhi {a.latency_method}, Hartmann-6 with n "
              f"{'of its own suggestions told in order' if told else 'random observations'}, "
              f"{os.cpu_count()} cores "
              f"(cold: first suggestion after them; warm: median of the next "
              f"{a.latency_repeats}" + ("; tell: mean and slowest on_complete of the run)"
                                        if told else ")"))
        print("n".rjust(6) + "jizhi cold ms".rjust(15) + "jizhi warm ms".rjust(15) +
              "GPSampler cold ms".rjust(19) + "GPSampler warm ms".rjust(19))
        env = {k: v for k, v in os.environ.items()
               if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        for n in ns:
            out = subprocess.run([a.driver, "latency-told" if told else "latency", str(n),
                                  str(a.latency_repeats), a.latency_method],
                                 capture_output=True, text=True, env=env, check=True)
            j = json.loads(out.stdout.strip().splitlines()[-1])
            g = None
            if "optuna-gp" not in skipped and a.latency_method == "bo":
                o = subprocess.run([sys.executable, __file__, "--gp-latency-only", str(n),
                                    "--latency-repeats", str(a.latency_repeats)],
                                   capture_output=True, text=True, env=env)
                g = json.loads(o.stdout.strip().splitlines()[-1]) if o.returncode == 0 else None
            lat.append({"n": n, "jizhi": j, "gpsampler": g})
            print(f"{n:6d}{j['cold_ms']:15.3f}{j['warm_ms']:15.3f}" +
                  (f"{g['cold_ms']:19.1f}{g['warm_ms']:19.1f}" if g else "-".rjust(19) * 2) +
                  (f"   tell mean {j['tell_mean_ms']:.4f} ms, max {j['tell_max_ms']:.3f} ms"
                   if told else ""), flush=True)
        print("goals: jizhi bo <= 50 ms at n=100, <= 1000 ms at n=1000; tpe and cmaes <= 5 ms "
              "at n=1000")

    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump({"seeds": a.seeds, "seed0": a.seed0, "evals": a.evals,
                       "regret": {f"{f}/{m}": v for (f, m), v in res.items()},
                       "median": {f"{f}/{m}": v for (f, m), v in med.items()},
                       "latency": lat, "skipped": skipped}, fh, indent=1)
        print(f"results: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
