"""bench/schedulers_pbt.py - jizhi's live PBT against Ray Tune's PBT and
against the same configurations without PBT (part of `make
bench-schedulers`). A benchmark, not a test: nothing is asserted.

The setting, and why PBT should matter in it: a Fashion-MNIST MLP trained
with plain SGD (momentum 0.9) at a constant learning rate for long enough
(about 11 epochs of 15000 examples in the full run) that the best final accuracy
needs a schedule: a large rate early, a small one late. No fixed rate does
both; PBT can find the schedule by exploiting the members that lowered
their rate at the right time. The searched param is lr (log 1e-3..0.5).

Three arms per seed, all from the same 8 initial configurations (jizhi's
random scheduler and its pbt scheduler draw suggestion k from stream k of
the seed; checked below, and Ray is given them as points_to_evaluate):

  no_pbt  jizhi, scheduler random: the 8 configurations trained to the end.
  jizhi   jizhi, scheduler pbt (population 8): ready every `interval`
          steps, bottom quarter copies a top-quarter member live (weights,
          optimiser state and step through a checkpoint `load`, no
          restart) and perturbs lr by 0.8/1.2 (resample 0.25).
  ray     Ray Tune PopulationBasedTraining (bench/pbt_ray.py): the same
          quantile, factors, resample probability and interval; a function
          trainable that runs jizhi-train standalone per interval from the
          trial's checkpoint; exploit restores the donor's checkpoint.

Equal compute: population 8, the same steps per member (iterations x
interval), one thread per trainer, on the machine's 2 CPUs: jizhi runs the
8 members at once (the OS shares the cores); Ray runs 2 at a time (1 CPU
per trial, num_cpus=2) and time-multiplexes the rest. Ray is installed
into a virtual environment under $BUILD/bench (pip, with pins that keep
Debian's numpy and torch); without it the Ray arm reports SKIPPED.

Reported per seed and as medians over seeds: best and mean final val_acc,
wall time, exploits (loads) and restarts (process starts beyond one per
member). Writes the "pbt" section of $BENCH_SCHED_JSON when set.

    python3 bench/schedulers_pbt.py [--quick] [--seeds 5] [--first-seed 1] [--no-ray]
        [--arms no_pbt,jizhi,ray] [--pbt-opts JSON] [--keep DIR]

--first-seed picks fresh seeds (tuning on other seeds than the reported
ones); --keep leaves each arm's directory (its jizhi.db: metrics, loads
and their reasons, params by generation) in DIR (a new directory).
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import build_dir, ensure_venv, jizhi_env, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = build_dir()
JIZHI = os.path.join(BUILD, "bin", "jizhi")
TRAIN = os.path.join(BUILD, "bin", "jizhi-train")
DATA = "/usr/share/datasets/fashion-mnist"
VENV = os.path.join(BUILD, "bench", "ray-venv")
# Ray 2.60 with what keeps Debian's numpy 1.24 (and so its torch 1.13)
# working: pandas < 2.3 and pyarrow 17-18 still run on numpy 1.x.
RAY_PINS = ["ray[tune]==2.60.0", "pandas<2.3", "pyarrow>=17,<19"]
SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 0.5, "log": True}}
POP = 8
PERTURB = [0.8, 1.2]
QUANTILE = 0.25
RESAMPLE = 0.25


def env():
    return jizhi_env(BUILD)


def trainer_args(args, seed):
    return ["--dataset", "fashion-mnist", "--train-subset", str(args.subset), "--val-size",
            str(args.val), "--hidden", "128", "--batch-size", "64", "--momentum", "0.9",
            "--epochs", "1000", "--eval-every", str(args.interval), "--log-every", "1000",
            "--threads", "1", "--quiet", "--seed", str(seed)]


def spec(name, sched, args, seed):
    return {
        "name": name,
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": sched,
        "budget": {"trials": POP, "parallel": POP},
        "space": SPACE,
        "trial": {"command": ["jizhi-train"] + trainer_args(args, seed) +
                  ["--max-steps", str(args.iterations * args.interval)],
                  "timeout_s": 1800, "retries": 0},
    }


def run_jizhi(tmp, name, sched, args, seed):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    path = os.path.join(d, "spec.json")
    with open(path, "w") as f:
        json.dump(spec(name, sched, args, seed), f)
    t0 = time.time()
    p = subprocess.run([JIZHI, "run", path, "--db", os.path.join(d, "jizhi.db"), "--slots",
                        str(POP)], cwd=d, env=env(), capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:])
    con = sqlite3.connect(os.path.join(d, "jizhi.db"))
    finals, tests, steps = [], [], []
    for (tid,) in con.execute("SELECT id FROM trials ORDER BY number"):
        steps.append(con.execute("SELECT max(step) FROM metrics WHERE trial_id = ? AND "
                                 "name = 'val_acc'", (tid,)).fetchone()[0])
        for name, out in (("val_acc", finals), ("test_acc", tests)):
            r = con.execute("SELECT value FROM metrics WHERE trial_id = ? AND name = ? "
                            "ORDER BY attempt DESC, step DESC, time DESC LIMIT 1",
                            (tid, name)).fetchone()
            out.append(r[0] if r and r[0] is not None else float("nan"))
    gen0 = {}
    for tid, pname, value in con.execute(
            "SELECT trial_id, name, value FROM params WHERE generation = 0"):
        gen0.setdefault(tid, {})[pname] = json.loads(value) if isinstance(value, str) else value
    loads = con.execute("SELECT count(*) FROM events WHERE kind = 'instruction' AND "
                        "json_extract(detail, '$.kind') = 'load' AND applied = 1").fetchone()[0]
    attempts = con.execute("SELECT COALESCE(SUM(attempt), 0) FROM trials").fetchone()[0]
    con.close()
    configs = [gen0[k] for k in sorted(gen0)]
    return {"finals": finals, "tests": tests, "steps": steps, "wall": wall, "loads": loads,
            "restarts": attempts, "configs": configs}


def ensure_ray(args):
    """The Ray venv's python, or (None, why)."""
    return ensure_venv(VENV, RAY_PINS, "import ray, ray.tune", "pbt",
                       install=not args.no_install)


def run_ray(py, tmp, name, configs, args, seed):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    cfg = {"command": [TRAIN] + trainer_args(args, seed), "configs": configs,
           "interval": args.interval, "iterations": args.iterations, "cpus": args.cpus,
           "cpu_per_trial": args.cpus / POP if args.ray_cpu == 0 else args.ray_cpu,
           "seed": seed, "space": SPACE, "perturb": PERTURB, "quantile": QUANTILE,
           "resample_p": RESAMPLE, "workdir": d}
    path = os.path.join(d, "cfg.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    e = env()
    e["TMPDIR"] = d  # Ray's session files
    t0 = time.time()
    p = subprocess.run([py, os.path.join(ROOT, "bench", "pbt_ray.py"), path], cwd=d, env=e,
                       capture_output=True, text=True)
    wall = time.time() - t0
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        sys.stderr.write("ray arm failed (exit %d):\n%s\n" % (p.returncode, p.stderr[-3000:]))
        return None
    out["wall_process"] = wall  # with Python and Ray start-up
    out["loads"] = out["perturbations"]
    out["restarts"] = out["process_starts"] - len(configs)
    return out


def summary(r):
    """best/mean final val_acc; the test_acc of the member with the best final
    val_acc (the model one would pick, scored on examples no arm selected on)
    and the mean test_acc."""
    nan = float("nan")
    pairs = [(v, t) for v, t in zip(r["finals"], r.get("tests") or [nan] * len(r["finals"]))
             if v == v]
    tests = [t for _, t in pairs if t == t]
    return {"best": max(v for v, _ in pairs) if pairs else nan,
            "mean": sum(v for v, _ in pairs) / len(pairs) if pairs else nan,
            "test_of_best": max(pairs)[1] if pairs else nan,
            "mean_test": sum(tests) / len(tests) if tests else nan}


def medians(rows, args, show):
    """Medians over the seeds done so far, printed when show; written to
    the JSON after every seed (a long run cut short keeps what it did)."""
    med = {}
    for arm, rs in rows.items():
        if not rs:
            continue
        med[arm] = {"best_val_acc": statistics.median(r["best"] for r in rs),
                    "mean_val_acc": statistics.median(r["mean"] for r in rs),
                    "test_acc_of_best": statistics.median(r["test_of_best"] for r in rs),
                    "mean_test_acc": statistics.median(r["mean_test"] for r in rs),
                    "wall_s": statistics.median(r["wall"] for r in rs),
                    "loads": statistics.median(r["loads"] for r in rs),
                    "restarts": statistics.median(r["restarts"] for r in rs),
                    "seeds": len(rs),
                    "per_seed": [{"seed": r["seed"], "best_val_acc": r["best"],
                                  "test_acc_of_best": r["test_of_best"],
                                  "mean_test_acc": r["mean_test"], "wall_s": r["wall"],
                                  "errors": r.get("errors", 0)} for r in rs]}
        m = med[arm]
        if show:
            print("%-5s %-7s %9.4f %9.4f %9.4f %9.4f %7.1f %6.1f %8.1f" % (
                "med", arm, m["best_val_acc"], m["mean_val_acc"], m["test_acc_of_best"],
                m["mean_test_acc"], m["wall_s"], m["loads"], m["restarts"]))
    if "jizhi" in med and "ray" in med:
        # paired by seed (the same initial configurations): jizhi - ray
        by = {r["seed"]: r for r in rows["ray"]}
        pairs = [(r, by[r["seed"]]) for r in rows["jizhi"] if r["seed"] in by]
        if pairs:
            med["jizhi_minus_ray"] = {
                "best_val_acc": statistics.median(a["best"] - b["best"] for a, b in pairs),
                "test_acc_of_best": statistics.median(a["test_of_best"] - b["test_of_best"]
                                                      for a, b in pairs),
                "seeds_jizhi_ahead_test": sum(a["test_of_best"] >= b["test_of_best"]
                                              for a, b in pairs),
                "seeds": len(pairs)}
            if show:
                d = med["jizhi_minus_ray"]
                print("pbt: per seed, jizhi - ray: median %+.4f best val_acc, %+.4f test_acc of "
                      "the best-val member; jizhi >= ray on %d of %d seeds (test)" % (
                          d["best_val_acc"], d["test_acc_of_best"], d["seeds_jizhi_ahead_test"],
                          d["seeds"]))
    if show and "jizhi" in med and "ray" in med and "no_pbt" in med:
        j, r, n = med["jizhi"], med["ray"], med["no_pbt"]
        print("pbt: median best val_acc jizhi %.4f, ray %.4f, no-PBT %.4f; test_acc of the "
              "best-val member jizhi %.4f, ray %.4f, no-PBT %.4f; jizhi wall %.2fx ray's" % (
                  j["best_val_acc"], r["best_val_acc"], n["best_val_acc"],
                  j["test_acc_of_best"], r["test_acc_of_best"], n["test_acc_of_best"],
                  j["wall_s"] / r["wall_s"]))
    if args.json:
        write_json(args.json, "pbt", med)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=1,
                    help="seeds first-seed..first-seed+seeds-1 (fresh seeds for tuning)")
    ap.add_argument("--keep", help="keep the arms' directories (databases) in this new "
                    "directory")
    ap.add_argument("--quick", action="store_true", help="1 seed, a shorter run")
    ap.add_argument("--subset", type=int, default=15000)
    ap.add_argument("--val", type=int, default=10000,
                    help="validation examples (PBT ranks on their val_acc)")
    ap.add_argument("--arms", default="no_pbt,jizhi,ray",
                    help="arms to run and report (no_pbt also runs for the ray arm: it "
                    "gives the configs)")
    ap.add_argument("--pbt-opts", help="JSON object merged into jizhi's pbt options")
    ap.add_argument("--interval", type=int, default=250, help="pbt interval in steps")
    ap.add_argument("--iterations", type=int, default=10, help="intervals per member")
    ap.add_argument("--cpus", type=int, default=2, help="Ray: CPUs (one per trial)")
    ap.add_argument("--ray-cpu", type=float, default=0,
                    help="Ray: CPUs per trial (0: cpus/population, all members at once)")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-install", action="store_true", help="do not pip install ray")
    ap.add_argument("--json", default=os.environ.get("BENCH_SCHED_JSON"))
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.iterations, args.interval, args.subset = 1, 6, 200, 8000
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("pbt: SKIPPED: Fashion-MNIST not found in %s (apt-get install "
              "dataset-fashion-mnist)" % DATA)
        return 0
    arms_on = set(args.arms.split(","))
    py, why = (None, "not in --arms") if "ray" not in arms_on else \
        (None, "--no-ray") if args.no_ray else ensure_ray(args)
    steps = args.iterations * args.interval
    print("pbt: Fashion-MNIST, MLP 128, %d train examples, batch 64, SGD momentum 0.9, "
          "%d steps (%.1f epochs) per member, population %d, interval %d steps, lr log "
          "1e-3..0.5, val_acc on %d held-out training examples (what PBT ranks on), test_acc "
          "on the 10000 test examples (never ranked on), %d CPUs, %d seed(s)" % (
              args.subset, steps, steps * 64 / args.subset, POP, args.interval, args.val,
              args.cpus, args.seeds))
    if why:
        print("pbt: ray arm SKIPPED: %s" % why)
    print("%-5s %-7s %9s %9s %9s %9s %7s %6s %8s" % (
        "seed", "arm", "best_val", "mean_val", "test@best", "mean_test", "wall_s", "loads",
        "restarts"))
    rows = {"no_pbt": [], "jizhi": [], "ray": []}
    opts = json.loads(args.pbt_opts) if args.pbt_opts else {}
    with tempfile.TemporaryDirectory(prefix="jz-bench-pbt-") as scratch:
        tmp = args.keep or scratch
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            base = None
            if "no_pbt" in arms_on or py:
                base = run_jizhi(tmp, "nopbt-%d" % seed, {"type": "random", "seed": seed},
                                 args, seed)
            arms = [("no_pbt", base)] if "no_pbt" in arms_on else []
            if "jizhi" in arms_on:
                sched = {"type": "pbt", "seed": seed, "interval": args.interval,
                         "quantile": QUANTILE, "resample_p": RESAMPLE, "perturb": PERTURB}
                sched.update(opts)
                live = run_jizhi(tmp, "pbt-%d" % seed, sched, args, seed)
                if base and live["configs"] != base["configs"]:
                    print("  note: pbt started from other configurations than no_pbt")
                arms.append(("jizhi", live))
            if py:
                r = run_ray(py, tmp, "ray-%d" % seed, base["configs"], args, seed)
                if r:
                    arms.append(("ray", r))
            for arm, r in arms:
                r.update(summary(r))
                r["seed"] = seed
                rows[arm].append(r)
                st = [x for x in r.get("steps") or [] if x is not None]
                print("%-5d %-7s %9.4f %9.4f %9.4f %9.4f %7.1f %6d %8d   final steps %s%s" % (
                    seed, arm, r["best"], r["mean"], r["test_of_best"], r["mean_test"],
                    r["wall"], r["loads"], r["restarts"],
                    "%d..%d" % (min(st), max(st)) if st else "-",
                    ", %d failed" % r["errors"] if r.get("errors") else ""))
            sys.stdout.flush()
            medians(rows, args, False)
    medians(rows, args, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
