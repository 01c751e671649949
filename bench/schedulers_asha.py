"""bench/schedulers_asha.py - ASHA against no early stopping, on
Fashion-MNIST with jizhi-train (part of `make bench-schedulers`; the
batch-size scheduler is bench/schedulers_batchsize.py). A benchmark, not a
test: numbers are reported, nothing is asserted.

ASHA vs no early stopping. Random search over lr (log 1e-3..1) and
momentum (0..0.99) of a small MLP, the same seed, so both arms draw the
same configurations in the same order; 9 epochs per full trial, ASHA with
grace 1 epoch, reduction 3 (rungs at 1 and 3). A third arm gives ASHA
three times the trials. Reported: trials, CPU-seconds (getrusage of the
whole `jizhi run` tree: controller, dispatcher and the trials, one thread
each), wall time, best val_acc and the best val_acc reached within the
CPU-seconds the ASHA arm used and within those the no-stopping arm used
("at equal CPU"; each trial's CPU taken as its run time, trials ordered by
end), and best val_acc per 100 CPU-s.

    python3 bench/schedulers_asha.py [--quick] [--seeds N]
"""
import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from benchlib import build_dir, jizhi_env, write_json

BUILD = build_dir()
JIZHI = os.path.join(BUILD, "bin", "jizhi")
DATA = "/usr/share/datasets/fashion-mnist"


def env():
    return jizhi_env(BUILD)


def run_study(tmp, spec, tries=3):
    """Runs a spec with `jizhi run`; returns (db path, CPU-s of the tree, wall s).
    A run that fails to start (e.g. a binary being rebuilt) is tried again."""
    d = os.path.join(tmp, spec["name"])
    for attempt in range(tries):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        path = os.path.join(d, "spec.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        p = subprocess.run([JIZHI, "run", path, "--db", os.path.join(d, "jizhi.db"), "--slots",
                            str(spec["budget"]["parallel"])], cwd=d, env=env(),
                           capture_output=True, text=True)
        wall = time.time() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        db = os.path.join(d, "jizhi.db")
        if p.returncode in (0, 1) and os.path.exists(db) and "finished" in p.stdout:
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            return db, cpu, wall
        sys.stderr.write(f"jizhi run {spec['name']} failed (exit {p.returncode}):\n"
                         f"{p.stderr[-1500:]}\n")
        time.sleep(2)
    raise SystemExit("jizhi run failed for " + spec["name"])


def sql(db, q, *a):
    con = sqlite3.connect(db)
    try:
        return con.execute(q, a).fetchall()
    finally:
        con.close()


# ---- ASHA ------------------------------------------------------------------

def asha_spec(name, seed, trials, es, args):
    s = {
        "name": name,
        "objective": {"metric": "val_acc", "mode": "max", "use": "best"},
        "scheduler": {"type": "random", "seed": seed},
        "budget": {"trials": trials, "parallel": 2},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
                  "momentum": {"type": "float", "low": 0.0, "high": 0.99}},
        "trial": {"command": ["jizhi-train", "--dataset", "fashion-mnist", "--train-subset",
                              str(args.subset), "--val-size", "2000", "--hidden", "256",
                              "--epochs", "9", "--batch-size", "128", "--threads", "1",
                              "--log-every", "100", "--quiet"],
                  "timeout_s": 900, "retries": 0},
    }
    if es:
        s["early_stopping"] = {"type": "asha", "resource": "epoch", "grace": 1, "reduction": 3}
    return s


def asha_arm(tmp, name, seed, trials, es, args):
    db, cpu, wall = run_study(tmp, asha_spec(name, seed, trials, es, args))
    rows = sql(db, "SELECT id, state, started, ended FROM trials ORDER BY ended")
    best_by = []  # (cumulative trial-seconds, best val_acc so far)
    cum, best = 0.0, float("nan")
    for tid, state, started, ended in rows:
        cum += (ended or started) - started
        (v,) = sql(db, "SELECT MAX(value) FROM metrics WHERE trial_id=? AND name='val_acc'",
                   tid)[0]
        if v is not None and not (best >= v):
            best = v
        best_by.append((cum, best))
    stopped = sum(1 for r in rows if r[1] == "stopped")
    return {"arm": name, "trials": len(rows), "stopped": stopped, "cpu": cpu, "wall": wall,
            "best": best, "curve": best_by, "trial_s": cum}


def best_within(curve, budget):
    b = float("nan")
    for c, v in curve:
        if c <= budget * 1.0001:
            b = v
    return b


def bench_asha(tmp, args):
    rows = []
    for seed in range(1, args.seeds + 1):
        n = args.trials
        none = asha_arm(tmp, f"none-s{seed}", seed, n, False, args)
        asha = asha_arm(tmp, f"asha-s{seed}", seed, n, True, args)
        asha3 = asha_arm(tmp, f"asha3x-s{seed}", seed, 3 * n, True, args)
        for a in (none, asha, asha3):
            a["at_equal"] = best_within(a["curve"], asha["trial_s"])
            a["at_none"] = best_within(a["curve"], none["trial_s"])
            a["seed"] = seed
            rows.append(a)
    print("\nload average during the runs: %.1f" % os.getloadavg()[1])
    print(f"ASHA vs no early stopping: Fashion-MNIST subset {args.subset}, MLP 256, "
          f"9 epochs/trial, 2 trials at a time, 1 thread each")
    print(f"{'seed':>4} {'arm':<10} {'trials':>6} {'stopped':>7} {'CPU-s':>7} {'wall-s':>7} "
          f"{'best acc':>8} {'acc@ASHA-CPU':>12} {'acc@none-CPU':>12} {'acc/100CPU-s':>12}")
    for a in rows:
        arm = a["arm"].split("-s")[0]
        print(f"{a['seed']:>4} {arm:<10} {a['trials']:>6} {a['stopped']:>7} {a['cpu']:>7.1f} "
              f"{a['wall']:>7.1f} {a['best']:>8.4f} {a['at_equal']:>12.4f} "
              f"{a['at_none']:>12.4f} {100 * a['best'] / a['cpu']:>12.3f}")
    for arm in ("none", "asha", "asha3x"):
        sel = [a for a in rows if a["arm"].startswith(arm + "-")]
        m = lambda k: sum(a[k] for a in sel) / len(sel)
        print(f"mean {arm:<10} {m('trials'):>6.0f} {m('stopped'):>7.1f} {m('cpu'):>7.1f} "
              f"{m('wall'):>7.1f} {m('best'):>8.4f} {m('at_equal'):>12.4f} "
              f"{m('at_none'):>12.4f} {100 * m('best') / m('cpu'):>12.3f}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one seed, fewer trials")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--json", default=os.environ.get("BENCH_SCHED_JSON"),
                    help="merge the rows into this JSON object (key asha)")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("asha: SKIPPED: Fashion-MNIST not found in %s" % DATA)
        return 0
    args.trials = 6 if args.quick else 9
    args.subset = 10000 if args.quick else 20000
    if args.quick:
        args.seeds = 1
    with tempfile.TemporaryDirectory(prefix="jz-bench-asha-") as tmp:
        rows = bench_asha(tmp, args)
    if args.json:
        for r in rows:
            r.pop("curve", None)
        write_json(args.json, "asha", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
