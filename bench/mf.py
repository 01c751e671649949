"""bench/mf.py - multi-fidelity search (`make bench-mf`): jizhi bo with ASHA
or Hyperband against Optuna's TPE with its HyperbandPruner, on the same
trainer and the same budget. A benchmark, not a test: numbers are
reported, nothing is asserted.

The problem: Fashion-MNIST with jizhi-train (an MLP with 128 hidden units,
a training subset as in examples/asha.json, 9 epochs for a full trial,
batch 128, one thread), searching lr (log 1e-3..1), momentum (0..0.99) and
weight_decay (log 1e-6..1e-2) for the best val_acc. Arms:

  bo+asha/joint  jizhi bo, early_stopping asha (grace 1, reduction 3,
                 max_resource 9); bo's fidelity "joint" (the default): one
                 GP over (params, resource)
  bo+asha/rungs  the same with fidelity "rungs": a GP on one level (BOHB)
  bo+hyperband/joint, bo+hyperband/rungs
                 jizhi bo, early_stopping hyperband (max_resource 9,
                 reduction 3: brackets with grace 1, 3, 9)
  bo+asha/final  fidelity "final" (bo learns from finished trials only):
                 what learning from partial results brings
  bo             jizhi bo without early stopping
  random+asha    jizhi random search with asha
  tpe+hyperband  Optuna TPE (multivariate, seeded) with HyperbandPruner
                 (min_resource 1, max_resource 9, reduction 3), running the
                 same jizhi-train standalone (parameters in JIZHI_PARAMS,
                 per-epoch val_acc read from its stderr and reported to the
                 pruner; a pruned trial's process is killed)

Every arm runs 2 trials at a time and stops when the epochs trained, over
all its trials, reach the budget (the same for every arm); the epochs
still in flight then are cut off. CPU-seconds are getrusage of the whole
process tree (jizhi run: controller, dispatcher and trials, bo's model fits
included; Optuna: its Python process, TPE included, and its trainers),
because the machine is shared and wall time says little. CPU is spread
over the run's epochs in proportion (every epoch costs about the same:
same model and batch, only the optimiser's numbers differ), so an arm's
curve is: best val_acc reported by any trial (any epoch, stopped or
not) against the CPU-seconds spent until then. The table gives that at
fractions of the smallest total CPU of the arms in a seed, averaged over
seeds. JSON with every curve: build/bench/mf.json.

    python3 bench/mf.py [--quick] [--seeds N] [--budget EPOCHS] [--arms a,b]
"""
import argparse
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import build_dir, jizhi_env

BUILD = build_dir()
JIZHI = os.path.join(BUILD, "bin", "jizhi")
TRAIN = os.path.join(BUILD, "bin", "jizhi-train")
DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 9
ARMS = ["bo+asha/joint", "bo+asha/rungs", "bo+hyperband/joint", "bo+hyperband/rungs",
        "bo+asha/final", "bo", "random+asha", "tpe+hyperband"]
SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
         "momentum": {"type": "float", "low": 0.0, "high": 0.99},
         "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-2, "log": True}}


def train_cmd(args):
    return [TRAIN, "--dataset", "fashion-mnist", "--train-subset", str(args.subset),
            "--val-size", "2000", "--hidden", "128", "--epochs", str(EPOCHS),
            "--batch-size", "128", "--threads", "1"]


def env():
    return jizhi_env(BUILD, OPENBLAS_NUM_THREADS="1")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---- jizhi -----------------------------------------------------------------

def jizhi_spec(arm, seed, args):
    sched, _, es = arm.partition("+")
    es, _, fid = es.partition("/")
    s = {
        "name": "mf",
        "objective": {"metric": "val_acc", "mode": "max", "use": "best"},
        "scheduler": {"type": sched, "seed": seed},
        "budget": {"trials": 10000, "parallel": 2},
        "space": SPACE,
        "trial": {"command": train_cmd(args) + ["--quiet"], "timeout_s": 1800,
                  "retries": 0},
    }
    if fid:
        s["scheduler"]["fidelity"] = fid
    if es == "asha":
        s["early_stopping"] = {"type": "asha", "resource": "epoch", "grace": 1,
                               "reduction": 3, "max_resource": EPOCHS}
    elif es == "hyperband":
        s["early_stopping"] = {"type": "hyperband", "resource": "epoch",
                               "max_resource": EPOCHS, "reduction": 3}
    return s


def sql(db, q, *a):
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute(q, a).fetchall()
    finally:
        con.close()


def jizhi_arm(tmp, arm, seed, args):
    """Runs `jizhi run` until the budget of epochs is reached; returns the
    events [(time, epochs so far, val_acc or None)] and the CPU-seconds."""
    d = os.path.join(tmp, f"{arm.replace('/', '-')}-s{seed}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path = os.path.join(d, "spec.json")
    with open(path, "w") as f:
        json.dump(jizhi_spec(arm, seed, args), f)
    db = os.path.join(d, "jizhi.db")
    c0 = children_cpu()
    p = subprocess.Popen([JIZHI, "run", path, "--db", db, "--slots", "2"], cwd=d, env=env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
    reader.start()
    while p.poll() is None:
        time.sleep(1)
        try:
            (n,) = sql(db, "SELECT COUNT(*) FROM metrics WHERE name='epoch'")[0]
        except sqlite3.Error:
            continue
        if n >= args.budget:
            p.send_signal(signal.SIGTERM)
            break
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    reader.join(timeout=5)
    cpu = children_cpu() - c0
    rows = sql(db, "SELECT time, trial_id, step, name, value FROM metrics "
               "WHERE name IN ('epoch', 'val_acc') ORDER BY time, rowid")
    # the trainer reports val_acc, then epoch, at the end of each epoch: the
    # value counts once its epoch is trained
    events, n, waiting = [], 0, {}
    for t, tid, step, name, value in rows:
        if name == "epoch":
            n += 1
            events.append((t, n, None))
            if (tid, step) in waiting:
                events.append((t, n, waiting.pop((tid, step))))
        else:
            waiting[(tid, step)] = value
    events += [(t, n, v) for (_, _), v in waiting.items()]
    states = sql(db, "SELECT state, COUNT(*) FROM trials GROUP BY state")
    return events, cpu, dict(states)


# ---- Optuna ------------------------------------------------------------------

def optuna_worker(argv):
    """In its own process (so its CPU is measured with its trainers): TPE +
    HyperbandPruner over jizhi-train, until the budget of epochs. Writes
    the events as JSON lines to --events."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int)
    ap.add_argument("--budget", type=int)
    ap.add_argument("--subset", type=int)
    ap.add_argument("--events")
    a = ap.parse_args(argv)
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lock = threading.Lock()
    state = {"epochs": 0, "stop": False}
    log = open(a.events, "w")

    def record(v):
        with lock:
            if v is None:
                state["epochs"] += 1
                if state["epochs"] >= a.budget:
                    state["stop"] = True
            log.write(json.dumps([time.time(), state["epochs"], v]) + "\n")
            log.flush()

    def objective(trial):
        params = {"lr": trial.suggest_float("lr", 1e-3, 1.0, log=True),
                  "momentum": trial.suggest_float("momentum", 0.0, 0.99),
                  "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True)}
        if state["stop"]:
            raise optuna.TrialPruned()
        e = env()
        e["JIZHI_PARAMS"] = json.dumps(params)
        p = subprocess.Popen(train_cmd(a), env=e, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        step_acc, best = {}, None
        try:
            for line in p.stderr:
                # standalone, the trainer's reports are "jizhi: step S name=value"
                if not line.startswith("jizhi: step "):
                    continue
                parts = line.split()
                if len(parts) < 4 or "=" not in parts[3]:
                    continue
                step = int(parts[2])
                name, _, value = parts[3].partition("=")
                if name == "val_acc":
                    step_acc[step] = float(value)
                elif name == "epoch" and step in step_acc:
                    acc = step_acc[step]
                    record(None)
                    record(acc)
                    best = acc if best is None else max(best, acc)
                    trial.report(acc, int(float(value)))
                    if state["stop"] or trial.should_prune():
                        p.kill()
                        raise optuna.TrialPruned()
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
        if best is None:
            raise optuna.TrialPruned()
        return best

    sampler = optuna.samplers.TPESampler(seed=a.seed, multivariate=True)
    pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=EPOCHS,
                                            reduction_factor=3)
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
    study.optimize(objective, n_jobs=2,
                   callbacks=[lambda s, t: s.stop() if state["stop"] else None])
    log.close()
    counts = {}
    for t in study.trials:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    print(json.dumps(counts))
    return 0


def optuna_arm(tmp, seed, args):
    ev = os.path.join(tmp, f"optuna-s{seed}.jsonl")
    c0 = children_cpu()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--optuna-worker",
                        "--seed", str(seed), "--budget", str(args.budget), "--subset",
                        str(args.subset), "--events", ev], env=env(), capture_output=True,
                       text=True)
    cpu = children_cpu() - c0
    if p.returncode != 0:
        raise RuntimeError("optuna arm failed: " + p.stderr[-1500:])
    with open(ev) as f:
        events = [tuple(json.loads(l)) for l in f if l.strip()]
    try:
        states = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        states = {}
    return events, cpu, states


# ---- analysis --------------------------------------------------------------------

def curve(events, cpu, budget):
    """[(cpu-seconds, best val_acc so far)] over the events up to the budget;
    CPU spread over the epochs in proportion."""
    total = min(max((n for _, n, _ in events), default=0), budget)
    per = cpu / max(total, 1) if events else 0
    best, out = None, []
    for _, n, v in events:
        if n > budget:
            break
        if v is not None and (best is None or v > best):
            best = v
            out.append((n * per, best))
    return out, total * per


def best_at(c, x):
    b = None
    for cx, v in c:
        if cx <= x * (1 + 1e-9):
            b = v
    return b


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--optuna-worker":
        return optuna_worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 seed, a 5000-example subset, 27 epochs, 3 arms")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, help="epochs per arm (default 90)")
    ap.add_argument("--subset", type=int, help="training examples (default 20000)")
    ap.add_argument("--arms", help="comma-separated, of: " + ", ".join(ARMS))
    ap.add_argument("--out", default=os.path.join(BUILD, "bench", "mf.json"))
    args = ap.parse_args()
    if args.quick:
        args.seeds = 1
    args.budget = args.budget or (27 if args.quick else 90)
    args.subset = args.subset or (5000 if args.quick else 20000)
    arms = args.arms.split(",") if args.arms else (
        ["bo+asha/joint", "random+asha", "tpe+hyperband"] if args.quick else ARMS)
    for a in arms:
        if a not in ARMS:
            raise SystemExit(f"bench-mf: unknown arm {a!r} (expected one of {', '.join(ARMS)})")
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("bench-mf: SKIPPED: Fashion-MNIST not found in %s" % DATA)
        return 0
    have_optuna = subprocess.run([sys.executable, "-c", "import optuna"],
                                 capture_output=True).returncode == 0
    if "tpe+hyperband" in arms and not have_optuna:
        print("bench-mf: Optuna is not installed (pip failed): the tpe+hyperband arm is "
              "SKIPPED")
        arms.remove("tpe+hyperband")
    runs = []
    with tempfile.TemporaryDirectory(prefix="jz-bench-mf-") as tmp:
        for seed in range(1, args.seeds + 1):
            for arm in arms:
                t0 = time.time()
                if arm == "tpe+hyperband":
                    events, cpu, states = optuna_arm(tmp, seed, args)
                else:
                    events, cpu, states = jizhi_arm(tmp, arm, seed, args)
                c, used = curve(events, cpu, args.budget)
                runs.append({"arm": arm, "seed": seed, "cpu_total": cpu, "cpu_budget": used,
                             "epochs": max((n for _, n, _ in events), default=0),
                             "wall": time.time() - t0, "trials": states, "curve": c})
                print(f"seed {seed} {arm:<14} CPU {cpu:7.1f} s  wall {time.time() - t0:6.0f} s"
                      f"  best {c[-1][1] if c else float('nan'):.4f}  trials {states}",
                      flush=True)
    fracs = [0.25, 0.5, 0.75, 1.0]
    table = {a: {f: [] for f in fracs} for a in arms}
    for seed in range(1, args.seeds + 1):
        sel = [r for r in runs if r["seed"] == seed]
        ref = min(r["cpu_budget"] for r in sel)
        for r in sel:
            for f in fracs:
                v = best_at(r["curve"], f * ref)
                table[r["arm"]][f].append((f * ref, v))
    print(f"\nbest val_acc against CPU-seconds (Fashion-MNIST subset {args.subset}, MLP 128, "
          f"{EPOCHS} epochs a full trial, budget {args.budget} epochs, 2 at a time; mean over "
          f"{args.seeds} seed(s); load average {os.getloadavg()[1]:.1f})")
    hdr = "".join(f"{'@' + format(sum(x for x, _ in table[arms[0]][f]) / len(table[arms[0]][f]), '.1f') + ' CPU-s':>14}"
                  for f in fracs)
    print(f"{'arm':<16}{hdr}")
    summary = {}
    for a in arms:
        cells, summary[a] = "", {}
        for f in fracs:
            vals = [v for _, v in table[a][f] if v is not None]
            m = sum(vals) / len(vals) if len(vals) == len(table[a][f]) and vals else None
            summary[a][str(f)] = {"cpu": sum(x for x, _ in table[a][f]) / len(table[a][f]),
                                  "best": m, "per_seed": [v for _, v in table[a][f]]}
            cells += f"{m:>14.4f}" if m is not None else f"{'-':>14}"
        print(f"{a:<16}{cells}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"subset": args.subset, "budget_epochs": args.budget, "seeds": args.seeds,
                   "fractions": fracs, "summary": summary, "runs": runs}, f, indent=1)
    print(f"(JSON: {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
