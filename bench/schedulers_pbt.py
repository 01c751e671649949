"""bench/schedulers_pbt.py - PBT against the same configurations without PBT.

Fashion-MNIST with jizhi-train (a small MLP on a subset, one thread per
trial). Arm "pbt": scheduler pbt, population 4 (budget.parallel = trials
= 4). Arm "fixed": scheduler random with the same seed and space, which
draws exactly the 4 initial configurations PBT starts from (both use
stream k of the seed for suggestion k; checked below), each trained to the
end without exploit. Equal compute: the same number of trials, epochs and
threads; a PBT receiver continues from its donor's step, so its run length
in steps stays the same within one interval.

Reported per seed and on average: the best final val_acc over the 4 trials
and the test_acc of that trial, the mean final val_acc, the number of
exploits and the wall time. Not a test: nothing is asserted.

    python3 bench/schedulers_pbt.py [--seeds 3] [--quick]
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
JIZHI = os.path.join(BUILD, "bin", "jizhi")
DATA = "/usr/share/datasets/fashion-mnist"


def env():
    e = dict(os.environ)
    e["PATH"] = os.path.join(BUILD, "bin") + os.pathsep + e.get("PATH", "")
    for k in list(e):
        if k.startswith("JIZHI_"):
            del e[k]
    return e


def spec(name, sched, args):
    return {
        "name": name,
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": sched,
        "budget": {"trials": 4, "parallel": 4},
        "space": {
            "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
            "momentum": {"type": "float", "low": 0.0, "high": 0.99},
        },
        "trial": {
            "command": ["jizhi-train", "--dataset", "fashion-mnist",
                        "--train-subset", str(args.subset), "--val-size", "2000",
                        "--hidden", "128", "--epochs", str(args.epochs), "--batch-size", "64",
                        "--eval-every", str(args.interval // 2), "--log-every", "50",
                        "--threads", "1", "--quiet"],
            "timeout_s": 900, "retries": 0,
        },
    }


def run_arm(tmp, name, sched, args):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    path = os.path.join(d, "spec.json")
    with open(path, "w") as f:
        json.dump(spec(name, sched, args), f)
    t0 = time.time()
    p = subprocess.run([JIZHI, "run", path], cwd=d, env=env(), capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:])
    con = sqlite3.connect(os.path.join(d, "jizhi.db"))
    trials = [r[0] for r in con.execute("SELECT id FROM trials ORDER BY number")]
    res = []
    for tid in trials:
        def last(metric):
            r = con.execute("SELECT value FROM metrics WHERE trial_id = ? AND name = ? "
                            "ORDER BY attempt DESC, step DESC, time DESC LIMIT 1",
                            (tid, metric)).fetchone()
            return r[0] if r and r[0] is not None else float("nan")
        res.append({"val": last("val_acc"), "test": last("test_acc")})
    gen0 = {}
    for tid, name_, value in con.execute("SELECT trial_id, name, value FROM params WHERE generation = 0"):
        gen0.setdefault(tid, {})[name_] = value
    loads = con.execute("SELECT count(*) FROM events WHERE kind = 'instruction' AND "
                        "json_extract(detail, '$.kind') = 'load' AND applied = 1").fetchone()[0]
    con.close()
    best = max(res, key=lambda r: r["val"] if r["val"] == r["val"] else -1)
    vals = [r["val"] for r in res if r["val"] == r["val"]]
    return {"best_val": best["val"], "best_test": best["test"],
            "mean_val": sum(vals) / len(vals) if vals else float("nan"),
            "loads": loads, "wall": wall, "initial": sorted(json.dumps(v, sort_keys=True) for v in gen0.values())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 seed, fewer epochs")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--subset", type=int, default=24000)
    ap.add_argument("--interval", type=int, default=300, help="pbt interval in steps")
    ap.add_argument("--pb2", action="store_true", help="also run pbt with pb2")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.epochs = 1, 3
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("pbt: Fashion-MNIST not found in %s (apt-get install dataset-fashion-mnist); skipped" % DATA)
        return 0
    arms = [("fixed", lambda s: {"type": "random", "seed": s}),
            ("pbt", lambda s: {"type": "pbt", "seed": s, "interval": args.interval})]
    if args.pb2:
        arms.append(("pb2", lambda s: {"type": "pbt", "seed": s, "interval": args.interval, "pb2": True}))
    print("pbt: Fashion-MNIST, MLP 128, %d train examples, %d epochs, batch 64, population 4, "
          "interval %d steps, 1 thread per trial, %d seeds" % (args.subset, args.epochs, args.interval,
                                                              args.seeds))
    print("%-6s %-6s %9s %10s %9s %6s %7s" % ("seed", "arm", "best_val", "its_test", "mean_val",
                                             "loads", "wall_s"))
    total = {a: {"best_val": 0.0, "best_test": 0.0, "mean_val": 0.0, "loads": 0, "wall": 0.0}
             for a, _ in arms}
    with tempfile.TemporaryDirectory(prefix="jz-bench-pbt-") as tmp:
        for seed in range(1, args.seeds + 1):
            init = None
            for arm, sched in arms:
                r = run_arm(tmp, "%s-%d" % (arm, seed), sched(seed), args)
                if init is None:
                    init = r["initial"]
                elif r["initial"] != init:
                    print("  note: %s started from other configurations than fixed" % arm)
                print("%-6d %-6s %9.4f %10.4f %9.4f %6d %7.1f" % (seed, arm, r["best_val"], r["best_test"],
                                                                  r["mean_val"], r["loads"], r["wall"]))
                for k in total[arm]:
                    total[arm][k] += r[k]
                sys.stdout.flush()
    n = args.seeds
    for arm, _ in arms:
        t = total[arm]
        print("%-6s %-6s %9.4f %10.4f %9.4f %6.1f %7.1f" % ("mean", arm, t["best_val"] / n,
                                                            t["best_test"] / n, t["mean_val"] / n,
                                                            t["loads"] / n, t["wall"] / n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
