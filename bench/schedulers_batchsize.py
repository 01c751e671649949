"""bench/schedulers_batchsize.py - the batch-size scheduler against every
fixed batch size of a grid, each at its best learning rate, and against
linear scaling at a large batch (part of `make bench-schedulers`). A
benchmark, not a test: nothing is asserted.

Measure: wall time (and samples) from the trial's start to the first
val_acc >= target, and the trainer's CPU-seconds by then (polled from
/proc every 0.25 s; on a shared machine the wall time moves with the load,
the CPU time much less), on Fashion-MNIST with jizhi-train (SGD, momentum 0.9,
one thread: with two, OpenBLAS's waiting threads counted CPU time that
grew with the load), evaluated every 3200 samples. The anchor is Pollux's goodput (Qiao et al.,
OSDI 2021): the scheduler picks the batch size that maximises throughput
x statistical efficiency, the latter from the gradient noise scale the
trainer reports, and rescales lr with AdaScale.

Arms, each one `jizhi run` study with one trial, run one at a time (the
run is stopped once the target is reached; the time is taken from the
stored report, not the stop):

  fixed B, lr   B in the grid, lr = c * 0.05 * sqrt(B/64), c in the sweep
                (0.5, 1, 2). Sweep on the first seed; every later seed runs
                each B at the c that needed the fewest samples for it on the
                first seed ("best lr in hindsight"; at one batch size the cost
                is proportional to the samples, which the load does not
                move). best_fixed per seed: the cheapest fixed arm. Cheapest: least trainer CPU-s to the target
                (--rank cpu, the default: the wall time of one run moved up
                to 10x with the shared machine's load) or wall time
                (--rank time).
  linear        B = the grid's largest, lr = 0.05 * B/64 with 0.5 epochs
                of warmup (Goyal et al.).
  batchsize     scheduler batchsize from B0 = 64 at the lr that was best for
                fixed 64 on the first seed (the fixed arms' hindsight; run
                after them), range 32..1024,
                AdaScale, "grow_only": true (measured: with the default
                the batch went down as often as up, e.g. 128 -> 32 after a
                noisy throughput fit, and such a shrink cost accuracy),
                "throughput": "cpu" (step costs from the trainer's
                step_cpu_s: on a shared host wall-clock step times taken at
                different sizes at different moments compare the load),
                "momentum": 0.9 (the trainer's; the efficiency uses
                B_simple / (1 - 0.9)); its decisions (batch_size and lr
                reports) are plotted to $BUILD/bench/<arm>-<model>-s<seed>.svg.
  batchsize-b_simple  the same with "momentum": 0: the efficiency from
                B_simple alone (the model before the momentum correction).
  batchsize-default  the scheduler's defaults (wall-clock throughput, may
                shrink), with "momentum": 0.9.

Models: the MLP (256,256) with 5 seeds, and a small CNN (channels 8,16)
with 1 seed and no sweep (c = 1) in the full run and not in --quick: a CNN
step costs ~20x an MLP step on these 2 cores. Wall times depend on the
machine's load (it is shared); samples do not. Writes the "batchsize"
section of $BENCH_SCHED_JSON (medians over seeds, MLP).

    python3 bench/schedulers_batchsize.py [--quick] [--seeds 5] [--models mlp,cnn]
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
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
EVAL_SAMPLES = 3200


def env():
    e = dict(os.environ)
    e["PATH"] = os.path.join(BUILD, "bin") + os.pathsep + e.get("PATH", "")
    for k in list(e):
        if k.startswith("JIZHI_"):
            del e[k]
    return e


MODELS = {
    # name: trainer flags, train subset, target, max epochs
    "mlp": (["--model", "mlp", "--hidden", "256,256"], 30000, 0.86, 4),
    # 0.80 was reached by no arm in 3 epochs (best 0.727 at B=32, 0.70 at 64)
    "cnn": (["--model", "cnn", "--channels", "8,16"], 10000, 0.70, 3),
}


def base_cmd(model, seed, batch, args):
    flags, subset, _, epochs = MODELS[model]
    if args.quick:
        subset = subset // 3
    return ["jizhi-train", "--dataset", "fashion-mnist", "--train-subset", str(subset),
            "--val-size", "5000", "--epochs", str(epochs), "--eval-every",
            str(max(1, EVAL_SAMPLES // batch)), "--log-every", "10", "--threads", "1",
            "--quiet", "--seed", str(seed), "--momentum", "0.9"] + flags


def target_of(model, args):
    return MODELS[model][2] - (0.03 if args.quick else 0)


def arm_spec(name, model, seed, kind, batch, lr, args):
    cmd = base_cmd(model, seed, batch, args)
    if kind.startswith("batchsize"):
        sched = {"type": "batchsize", "seed": seed, "min": 32, "max": 1024, "interval": 200,
                 "warmup": 100,
                 "throughput": "wall" if kind == "batchsize-default" else "cpu",
                 "grow_only": kind != "batchsize-default",
                 # the trial's SGD momentum (a flag here, not a param): the
                 # efficiency uses B_simple / (1 - 0.9); the b_simple arm is
                 # the model without it
                 "momentum": 0.0 if kind == "batchsize-b_simple" else 0.9}
        space = {"lr": {"type": "float", "low": lr, "high": lr},
                 "batch_size": {"type": "int", "low": batch, "high": batch}}
    else:
        sched = {"type": "random", "seed": seed}
        space = {"batch_size": {"type": "int", "low": batch, "high": batch}}
        cmd += ["--lr", repr(lr)]
        if kind == "linear":
            cmd += ["--warmup-epochs", "0.5"]
    return {"name": name, "objective": {"metric": "val_acc", "mode": "max", "use": "best"},
            "scheduler": sched, "budget": {"trials": 1, "parallel": 1}, "space": space,
            "trial": {"command": cmd, "timeout_s": 3600, "retries": 0}}


def sql(db, q, *a):
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute(q, a).fetchall()
    finally:
        con.close()


def trainer_cpu(root):
    """CPU-seconds (user + system) of the jizhi-train processes under root."""
    kids, comm, ticks = {}, {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        pid = int(d)
        kids.setdefault(int(f[1]), []).append(pid)
        comm[pid], ticks[pid] = name, int(f[11]) + int(f[12])
    total, todo = 0, [root]
    while todo:
        q = todo.pop()
        if comm.get(q, "").startswith("jizhi-train"):
            total += ticks[q]
        todo += kids.get(q, [])
    return total / os.sysconf("SC_CLK_TCK")


def run_arm(tmp, name, model, seed, kind, batch, lr, args):
    """Runs one arm until the target (then stops it) or its epochs end."""
    target = target_of(model, args)
    d = os.path.join(tmp, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path, db = os.path.join(d, "spec.json"), os.path.join(d, "jizhi.db")
    with open(path, "w") as f:
        json.dump(arm_spec(name, model, seed, kind, batch, lr, args), f)
    p = subprocess.Popen([JIZHI, "run", path, "--db", db, "--slots", "1"], cwd=d, env=env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    hit, cpu = None, []  # cpu: (time, CPU-s of the trainer) every poll
    while p.poll() is None:
        time.sleep(0.25)
        cpu.append((time.time(), trainer_cpu(p.pid)))
        try:
            hit = sql(db, "SELECT 1 FROM metrics WHERE name = 'val_acc' AND value >= ? LIMIT 1",
                      target)
        except sqlite3.Error:
            continue
        if hit:
            p.send_signal(signal.SIGINT)
            break
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    rows = sql(db, "SELECT id, started FROM trials")
    if not rows or rows[0][1] is None:
        sys.stderr.write("%s: no trial ran:\n%s\n" % (name, (err or "")[-1500:]))
        return None
    tid, started = rows[0]
    sizes = sql(db, "SELECT step, value, time FROM metrics WHERE trial_id=? AND "
                "name='batch_size' ORDER BY step", tid)
    lrs = sql(db, "SELECT step, value, time FROM metrics WHERE trial_id=? AND name='lr' "
              "ORDER BY step", tid)
    evals = sql(db, "SELECT step, value, time FROM metrics WHERE trial_id=? AND "
                "name='val_acc' ORDER BY step", tid)
    first = next(((s, v, t) for s, v, t in evals if v >= target), None)
    size_at = {st: v for st, v, _ in sizes}

    def samples_to(step):
        # the batch in force at each step: the last reported size before it
        total, cur, last = 0, batch, 0
        for s in sorted(size_at):
            if s > step:
                break
            total += (s - last) * cur
            cur, last = size_at[s], s
        return int(total + (step - last) * cur)

    cpu_hit = None
    if first:
        before = [c for t, c in cpu if t <= first[2]]
        cpu_hit = before[-1] if before else None
    changes = sql(db, "SELECT COUNT(*) FROM events WHERE who='batchsize' AND "
                  "kind='instruction' AND detail LIKE '%\"name\":\"batch_size\"%'")[0][0]
    return {"arm": name, "model": model, "seed": seed, "kind": kind, "batch": batch, "lr": lr,
            "steps": first[0] if first else None,
            "samples": samples_to(first[0]) if first else None,
            "time": first[2] - started if first else None, "cpu": cpu_hit,
            "best": max((v for _, v, _ in evals), default=None), "changes": changes,
            "final_b": sizes[-1][1] if sizes else batch,
            "trace": {"batch": [(t - started, v) for _, v, t in sizes],
                      "lr": [(t - started, v) for _, v, t in lrs],
                      "val": [(t - started, v) for _, v, t in evals]},
            "load": os.getloadavg()[0]}


def svg_plot(path, title, trace, target):
    """A small SVG of batch size (log2), lr and val_acc over time."""
    W, H, L, R, T, B = 720, 300, 60, 60, 30, 40
    series = [("batch", "#1f77b4", True), ("lr", "#d62728", True), ("val", "#2ca02c", False)]
    tmax = max([t for k, _, _ in series for t, _ in trace[k]] + [1e-9])
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">%s</text>' % (L, title)]
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R,
                                                                              H - B))
    for i in range(6):
        t = tmax * i / 5
        x = L + (W - L - R) * i / 5
        out.append('<text x="%.0f" y="%d" text-anchor="middle">%.0fs</text>' % (x, H - B + 15, t))
    import math
    for k, color, logy in series:
        pts = [(t, v) for t, v in trace[k] if v and v > 0]
        if not pts:
            continue
        ys = [math.log2(v) if logy else v for _, v in pts]
        lo, hi = min(ys), max(ys)
        if k == "val":
            lo, hi = min(lo, target), max(hi, target)
        if hi - lo < 1e-12:
            lo, hi = lo - 1, hi + 1
        sx = lambda t: L + (W - L - R) * t / tmax
        sy = lambda y: H - B - (H - B - T) * (y - lo) / (hi - lo)
        d, prev = [], None
        for (t, _), y in zip(pts, ys):
            if prev is not None and k != "val":  # a step function
                d.append("L%.1f,%.1f" % (sx(t), sy(prev)))
            d.append(("M" if not d else "L") + "%.1f,%.1f" % (sx(t), sy(y)))
            prev = y
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>' % (" ".join(d),
                                                                                 color))
        fmt = (lambda y: "%g" % round(2 ** y, 4)) if logy else (lambda y: "%.3f" % y)
        label = {"batch": "batch size", "lr": "lr", "val": "val_acc"}[k]
        out.append('<text x="%d" y="%d" fill="%s">%s %s..%s</text>' % (
            L + 170 * [s[0] for s in series].index(k), H - 8, color, label, fmt(lo), fmt(hi)))
        if k == "val":
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" '
                       'stroke-dasharray="4,3"/>' % (L, W - R, sy(target), sy(target), color))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def fmt(x, f):
    return format(x, f) if x is not None else "-"


def bench_model(tmp, model, args, plots):
    seeds = args.seeds if model == "mlp" else 1
    sweep = args.sweep if model == "mlp" else [1.0]
    target = target_of(model, args)
    rows = []
    best_c = {}
    print("\nbatchsize %s: Fashion-MNIST subset %d, SGD momentum 0.9, 1 thread, target val_acc "
          "%.2f, at most %d epochs, eval every %d samples, %d seed(s)" % (
              model, int(base_cmd(model, 1, 64, args)[4]), target, MODELS[model][3],
              EVAL_SAMPLES, seeds))
    print("%4s %-18s %6s %8s %7s %6s %8s %7s %7s %5s" % (
        "seed", "arm", "steps", "samples", "time-s", "CPU-s", "best acc", "changes", "final B",
        "load"))
    for seed in range(1, seeds + 1):
        fixed_arms = []
        for b in args.batches:
            cs = sweep if seed == 1 else [best_c.get(b, 1.0)]
            for c in cs:
                lr = round(c * 0.05 * (b / 64) ** 0.5, 6)
                fixed_arms.append(("fixed", b, lr, "fixed%d-lr%g" % (b, lr)))

        def later_arms():
            # the scheduler starts at B0 = 64 with the lr that was best for
            # fixed 64 on seed 1 (the same hindsight the fixed arms get)
            lr0 = round(best_c.get(64, 1.0) * 0.05, 6)
            bl = max(args.batches)
            return [("linear", bl, 0.05 * bl / 64, "linear%d" % bl),
                    ("batchsize", 64, lr0, "batchsize"),
                    ("batchsize-b_simple", 64, lr0, "batchsize-b_simple"),
                    ("batchsize-default", 64, lr0, "batchsize-default")]

        for phase in (0, 1):
            arms = fixed_arms if phase == 0 else later_arms()
            if args.only == "sched":
                arms = [a for a in arms if a[0].startswith("batchsize")]
            if args.arms:
                arms = [a for a in arms if a[0] in args.arms.split(",")]
            for kind, b, lr, label in arms:
                r = run_arm(tmp, "%s-%s-s%d" % (model, label, seed), model, seed, kind, b, lr,
                            args)
                if r is None:
                    continue
                r["label"] = label
                rows.append(r)
                print("%4d %-18s %6s %8s %7s %6s %8s %7d %7.0f %5.1f" % (
                    seed, label, fmt(r["steps"], ">6"), fmt(r["samples"], ">8"),
                    fmt(r["time"], ">7.1f"), fmt(r["cpu"], ">6.1f"), fmt(r["best"], ">8.4f"),
                    r["changes"], r["final_b"], r["load"]))
                sys.stdout.flush()
                if kind.startswith("batchsize") and plots:
                    os.makedirs(plots, exist_ok=True)
                    svg_plot(os.path.join(plots, "%s-%s-s%d.svg" % (kind, model, seed)),
                             "%s, %s, seed %d (lr0 %g): batch size (log), lr (log), val_acc "
                             "over time" % (kind, model, seed, lr), r["trace"], target)
            if phase == 0 and seed == 1 and args.only == "all":
                for b in args.batches:
                    cands = [r for r in rows if r["seed"] == 1 and r["kind"] == "fixed" and
                             r["batch"] == b]
                    ok = [r for r in cands if r[args.rank] is not None]
                    # within one batch size the cost is proportional to the
                    # samples, which the load does not move (the CPU-s of one
                    # run did, up to 1.5x at the same samples)
                    ok = [r for r in cands if r["samples"] is not None]
                    pick = min(ok, key=lambda r: r["samples"]) if ok else \
                        max(cands, key=lambda r: r["best"] or 0) if cands else None
                    best_c[b] = (pick["lr"] / (0.05 * (b / 64) ** 0.5)) if pick else 1.0
    # per seed: best fixed (fastest to target), the ratios
    per_seed = []
    for seed in range(1, seeds + 1):
        fixed = [r for r in rows if r["seed"] == seed and r["kind"] == "fixed" and r["time"]
                 and r[args.rank] is not None]
        ad = [r for r in rows if r["seed"] == seed and r["kind"] == "batchsize"]
        aw = [r for r in rows if r["seed"] == seed and r["kind"] == "batchsize-default"]
        ab = [r for r in rows if r["seed"] == seed and r["kind"] == "batchsize-b_simple"]
        lin = [r for r in rows if r["seed"] == seed and r["kind"] == "linear"]
        if not fixed or not ad:
            print("seed %d: no fixed batch reached the target" % seed if not fixed else
                  "seed %d: the batchsize arm did not run" % seed)
            continue
        bt = min(fixed, key=lambda r: r[args.rank])
        a, l = ad[0], lin[0] if lin else None
        per_seed.append({"seed": seed, "best_fixed": bt, "jizhi": a, "linear": l,
                         "wall": aw[0] if aw else None, "bsimple": ab[0] if ab else None})
        bc = min((r for r in fixed if r["cpu"]), key=lambda r: r["cpu"], default=None)
        per_seed[-1]["best_fixed_cpu"] = bc
        print("seed %d: best fixed B=%d lr %g %.1fs %d samples; batchsize %s (x%s time, "
              "x%s samples; CPU-s x%s the least fixed, B=%s); linear B=%d %s" % (
                  seed, bt["batch"], bt["lr"], bt["time"], bt["samples"],
                  fmt(a["time"], ".1f") + "s" if a["time"] else "did not reach it",
                  fmt(a["time"] / bt["time"], ".2f") if a["time"] else "-",
                  fmt(a["samples"] / bt["samples"], ".2f") if a["samples"] else "-",
                  fmt(a["cpu"] / bc["cpu"], ".2f") if a["cpu"] and bc else "-",
                  bc["batch"] if bc else "-",
                  l["batch"] if l else 0,
                  fmt(l["time"], ".1f") + "s" if l and l["time"] else "did not reach it"))
    return rows, per_seed


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(per_seed):
    if not per_seed:
        return None
    inf = float("inf")
    jt = [p["jizhi"]["time"] if p["jizhi"]["time"] is not None else inf for p in per_seed]
    js = [p["jizhi"]["samples"] if p["jizhi"]["samples"] is not None else inf for p in per_seed]
    lt = [p["linear"]["time"] if p["linear"] and p["linear"]["time"] is not None else inf
          for p in per_seed]
    ratios = [j / p["best_fixed"]["time"] for j, p in zip(jt, per_seed)]
    jc = [p["jizhi"]["cpu"] if p["jizhi"]["cpu"] is not None else inf for p in per_seed]
    cr = [j / p["best_fixed_cpu"]["cpu"] if p.get("best_fixed_cpu") else inf
          for j, p in zip(jc, per_seed)]
    out = {"jizhi": {"time_to_target_s": statistics.median(jt),
                     "samples_to_target": statistics.median(js),
                     "cpu_to_target_s": statistics.median(jc)},
           "best_fixed": {"time_to_target_s": med(p["best_fixed"]["time"] for p in per_seed),
                          "samples_to_target": med(p["best_fixed"]["samples"]
                                                   for p in per_seed),
                          "batch_size": med(p["best_fixed"]["batch"] for p in per_seed),
                          "cpu_to_target_s": med(p["best_fixed_cpu"]["cpu"] for p in per_seed
                                                 if p.get("best_fixed_cpu"))},
           "linear": {"time_to_target_s": statistics.median(lt)},
           "jizhi_default_options": {
               "time_to_target_s": med(p["wall"]["time"] for p in per_seed if p["wall"]),
               "samples_to_target": med(p["wall"]["samples"] for p in per_seed if p["wall"]),
               "cpu_to_target_s": med(p["wall"]["cpu"] for p in per_seed if p["wall"])},
           "jizhi_b_simple_model": {
               "time_to_target_s": med(p["bsimple"]["time"] for p in per_seed if p["bsimple"]),
               "samples_to_target": med(p["bsimple"]["samples"] for p in per_seed
                                        if p["bsimple"]),
               "cpu_to_target_s": med(p["bsimple"]["cpu"] for p in per_seed if p["bsimple"])},
           "time_ratio_jizhi_to_best_fixed": statistics.median(ratios),
           "cpu_ratio_jizhi_to_least_fixed": statistics.median(cr),
           "cpu_ratio_b_simple_model_to_least_fixed": statistics.median(
               [p["bsimple"]["cpu"] / p["best_fixed_cpu"]["cpu"]
                if p.get("bsimple") and p["bsimple"]["cpu"] and p.get("best_fixed_cpu")
                else inf for p in per_seed]),
           "seeds": len(per_seed)}
    for d in out.values():  # JSON has no infinity: null = not reached
        if isinstance(d, dict):
            for k, v in d.items():
                if v == inf:
                    d[k] = None
    for k in ("time_ratio_jizhi_to_best_fixed", "cpu_ratio_jizhi_to_least_fixed",
              "cpu_ratio_b_simple_model_to_least_fixed"):
        if out[k] == inf:
            out[k] = None
    return out


def write_json(path, key, value):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    doc[key] = value
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, MLP only, half the data")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--models", default=None, help="mlp,cnn (default: both; --quick: mlp)")
    ap.add_argument("--rank", choices=["cpu", "time"], default="cpu",
                    help="best fixed (and best lr) by the trainer's CPU-s or wall time to "
                    "the target")
    ap.add_argument("--only", choices=["all", "sched"], default="all",
                    help="sched: only the scheduler's arms (after a change to it)")
    ap.add_argument("--arms", help="only these arm kinds (fixed,linear,batchsize,"
                    "batchsize-default,batchsize-b_simple)")
    ap.add_argument("--json", default=os.environ.get("BENCH_SCHED_JSON"))
    args = ap.parse_args()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("batchsize: SKIPPED: Fashion-MNIST not found in %s" % DATA)
        return 0
    args.batches = [32, 64, 128, 256, 512]
    args.sweep = [0.5, 1.0, 2.0]
    models = (args.models or ("mlp" if args.quick else "mlp,cnn")).split(",")
    if args.quick:
        args.seeds, args.batches, args.sweep = 1, [32, 128, 512], [1.0, 2.0]
    plots = os.path.join(BUILD, "bench")
    out = {}
    with tempfile.TemporaryDirectory(prefix="jz-bench-bs-") as tmp:
        for model in models:
            rows, per_seed = bench_model(tmp, model, args, plots)
            s = summarize(per_seed)
            if s:
                out[model] = s
                print("batchsize %s, medians over %d seed(s): jizhi %s s / %s samples; best "
                      "fixed %s s / %s samples (B %s); linear %s s; time ratio %s; CPU-s ratio "
                      "to the least-CPU fixed %s (B_simple-only model %s)" % (
                          model, s["seeds"], fmt(s["jizhi"]["time_to_target_s"], ".1f"),
                          fmt(s["jizhi"]["samples_to_target"], ".0f"),
                          fmt(s["best_fixed"]["time_to_target_s"], ".1f"),
                          fmt(s["best_fixed"]["samples_to_target"], ".0f"),
                          fmt(s["best_fixed"]["batch_size"], ".0f"),
                          fmt(s["linear"]["time_to_target_s"], ".1f"),
                          fmt(s["time_ratio_jizhi_to_best_fixed"], ".2f"),
                          fmt(s["cpu_ratio_jizhi_to_least_fixed"], ".2f"),
                          fmt(s["cpu_ratio_b_simple_model_to_least_fixed"], ".2f")))
    if args.json and out:
        first = out.get("mlp") or next(iter(out.values()))
        sec = dict(first)
        sec["models"] = out
        write_json(args.json, "batchsize", sec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
