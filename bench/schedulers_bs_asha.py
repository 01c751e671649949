"""bench/schedulers_bs_asha.py - ASHA and the batch-size scheduler against
their baselines, on Fashion-MNIST with jizhi-train (part of `make
bench-schedulers`). Benchmarks, not tests: numbers are reported, nothing
is asserted.

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

Batch size vs the best fixed batch size. One trial per arm, trained
until a target val_acc or at most E epochs, evaluated every 3200 samples
(every 3200/B0 = 50 steps for the batchsize arm, whose batch then grows or
shrinks: coarser or finer);
fixed arms B in {32..512} with lr = 0.05 * sqrt(B/64) (the trainer's
--lr-scaling sqrt), the batchsize arm starting at 64 with lr 0.05 and
AdaScale. Reported: steps, samples and wall time (from the trial's start
to the stored report) to the target, and the final val_acc. Arms run one
at a time so wall times do not interfere.

    python3 bench/schedulers_bs_asha.py [--quick] [--seeds N] [--part asha|bs]
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


# ---- batch size --------------------------------------------------------------

def bs_spec(name, seed, batch, adaptive, args):
    cmd = ["jizhi-train", "--dataset", "fashion-mnist", "--train-subset", str(args.bs_subset),
           "--val-size", "5000", "--hidden", "256,256", "--epochs", str(args.bs_epochs),
           "--eval-every", str(max(1, 3200 // batch)), "--log-every", "10", "--threads", "2",
           "--quiet",
           "--seed", str(seed), "--momentum", "0.9"]
    if adaptive:
        sched = {"type": "batchsize", "seed": seed, "min": 32, "max": 1024, "interval": 200,
                 "warmup": 100}
        space = {"lr": {"type": "float", "low": 0.05, "high": 0.05},
                 "batch_size": {"type": "int", "low": batch, "high": batch}}
    else:
        sched = {"type": "random", "seed": seed}
        space = {"batch_size": {"type": "int", "low": batch, "high": batch}}
        cmd += ["--lr", "0.05", "--lr-scaling", "sqrt", "--base-batch", "64"]
    return {
        "name": name,
        "objective": {"metric": "val_acc", "mode": "max", "use": "best"},
        "scheduler": sched,
        "budget": {"trials": 1, "parallel": 1},
        "space": space,
        "trial": {"command": cmd, "timeout_s": 1800, "retries": 0},
    }


def bs_arm(tmp, name, seed, batch, adaptive, args):
    db, cpu, wall = run_study(tmp, bs_spec(name, seed, batch, adaptive, args))
    (tid, started) = sql(db, "SELECT id, started FROM trials")[0]
    sizes = dict(sql(db, "SELECT step, value FROM metrics WHERE trial_id=? AND name='batch_size'",
                     tid))
    evals = sql(db, "SELECT step, value, time FROM metrics WHERE trial_id=? AND name='val_acc' "
                "ORDER BY step", tid)
    hit = next(((s, v, t) for s, v, t in evals if v >= args.target), None)

    def samples_to(step):
        # the batch in force at each step: the last reported size at or before it
        total, cur, last = 0, batch, 0
        for s in sorted(sizes):
            if s > step:
                break
            total += (s - last) * cur
            cur, last = sizes[s], s
        return total + (step - last) * cur

    changes = sql(db, "SELECT COUNT(*) FROM events WHERE who='batchsize' AND kind='instruction' "
                  "AND detail LIKE '%\"name\":\"batch_size\"%'")[0][0]
    final_b = sizes[max(sizes)] if sizes else batch
    return {"arm": name, "batch": batch, "adaptive": adaptive, "seed": seed,
            "steps": hit[0] if hit else None, "samples": samples_to(hit[0]) if hit else None,
            "time": hit[2] - started if hit else None, "final": evals[-1][1] if evals else None,
            "best": max(v for _, v, _ in evals) if evals else None, "changes": changes,
            "final_b": final_b, "cpu": cpu}


def bench_bs(tmp, args):
    rows = []
    for seed in range(1, args.seeds + 1):
        for b in args.batches:
            rows.append(bs_arm(tmp, f"fixed{b}-s{seed}", seed, b, False, args))
        rows.append(bs_arm(tmp, f"batchsize-s{seed}", seed, 64, True, args))
    print("\nload average during the runs: %.1f (wall times are only comparable on an idle "
          "machine; samples are not affected)" % os.getloadavg()[1])
    print(f"Batch-size scheduler vs fixed batch sizes: Fashion-MNIST subset {args.bs_subset}, "
          f"MLP 256,256, SGD momentum 0.9, 2 threads, target val_acc {args.target}, "
          f"at most {args.bs_epochs} epochs")
    print(f"{'seed':>4} {'arm':<16} {'steps':>6} {'samples':>8} {'time-s':>7} {'best acc':>8} "
          f"{'changes':>7} {'final B':>7}")
    fmt = lambda x, f: format(x, f) if x is not None else "-"
    for r in rows:
        arm = "batchsize(64->)" if r["adaptive"] else f"fixed {r['batch']}"
        print(f"{r['seed']:>4} {arm:<16} {fmt(r['steps'], '>6')} {fmt(r['samples'], '>8')} "
              f"{fmt(r['time'], '>7.1f')} {fmt(r['best'], '>8.4f')} {r['changes']:>7} "
              f"{r['final_b']:>7.0f}")
    # best fixed per seed: least wall time to target
    for seed in range(1, args.seeds + 1):
        fixed = [r for r in rows if r["seed"] == seed and not r["adaptive"] and r["time"]]
        ad = [r for r in rows if r["seed"] == seed and r["adaptive"]][0]
        if not fixed:
            print(f"seed {seed}: no fixed batch reached the target")
            continue
        bt = min(fixed, key=lambda r: r["time"])
        bsm = min(fixed, key=lambda r: r["samples"])
        if ad["time"]:
            print(f"seed {seed}: best fixed by time B={bt['batch']} {bt['time']:.1f}s; "
                  f"batchsize {ad['time']:.1f}s (ratio {ad['time'] / bt['time']:.2f}); "
                  f"fewest samples fixed B={bsm['batch']} {bsm['samples']}, batchsize "
                  f"{ad['samples']} (ratio {ad['samples'] / bsm['samples']:.2f})")
        else:
            print(f"seed {seed}: best fixed B={bt['batch']} {bt['time']:.1f}s; batchsize did not "
                  f"reach the target")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one seed, fewer trials")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--part", choices=["asha", "bs", "all"], default="all")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("bench-schedulers bs_asha: skipped (no Fashion-MNIST under %s)" % DATA)
        return 0
    args.trials = 6 if args.quick else 9
    args.subset = 10000 if args.quick else 20000
    args.bs_subset = 20000 if args.quick else 55000  # + 5000 held out for val_acc
    args.bs_epochs = 3 if args.quick else 6
    args.target = 0.84 if args.quick else 0.87
    args.batches = [32, 64, 128, 256, 512]
    if args.quick:
        args.seeds = 1
    out = {}
    with tempfile.TemporaryDirectory(prefix="jz-bench-bs-asha-") as tmp:
        if args.part in ("asha", "all"):
            out["asha"] = bench_asha(tmp, args)
        if args.part in ("bs", "all"):
            out["bs"] = bench_bs(tmp, args)
    if args.json:
        for rows in out.values():
            for r in rows:
                r.pop("curve", None)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
