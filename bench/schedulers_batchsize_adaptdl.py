#!/usr/bin/env python3
"""bench/schedulers_batchsize_adaptdl.py - the batch-size scheduler's peer: AdaptDL, the
library of Pollux (OSDI 2021), against PyTorch's own best fixed batch, on the
setting of the batch-size bench's headline (`mlp-2r`): the Fashion-MNIST MLP
(784-256-256-10) on two data-parallel CPU ranks of one thread, SGD with
momentum 0.9, 55000 training examples, time to val_acc 0.88 on 5000 held-out
ones, evaluated every 3200 samples, at most 8 epochs. A benchmark, not a test:
nothing is asserted.

It answers what the user who picks the peer gets, on the same machine: the
adaptive arm's time to the target over the best fixed batch's, the ratio
bench/schedulers_batchsize.py measures for jizhi. Arms (each two ranks over
gloo on loopback):
  fixed B at lr  PyTorch DistributedDataParallel, a constant rate; every
                 batch of the grid at every rate c * 0.05 * sqrt(B/64), c in
                 --sweep, on every seed; each batch's rate is the one with the
                 least median time over the seeds (the jizhi bench's
                 --sweep-all), and the best fixed batch of a seed the least
                 time among those;
  adaptdl        AdaptiveDataParallel (its default scaling rule, AdaScale) and
                 AdaptiveDataLoader with autoscale_batch_size: it starts at 64
                 with the rate best for fixed 64 in jizhi's sweep (as jizhi's
                 scheduler does) and picks the batch up to 1024 by its goodput
                 model; it never goes below its starting batch, so it also
                 starts at 512 with the rate chosen for fixed 512 (--starts).
Each arm runs --replicas times at its rate times 1 + 1e-4 k (k = 0, -1, 1, ...)
and keeps its median replica by time: one run's time to the target is chaotic
(docs/bench.md).

The measure is the training time to the first evaluation at or over the
target: the wall time of the training loop on rank 0 with the evaluations (and,
for AdaptDL, the bench's calls of its model fit, below) left out. Samples are
printed too. The machine must be otherwise idle.

What the harness does to AdaptDL 0.2.11, and why: numpy's `np.int` (removed in
numpy 1.24, used once in its goodput.py) is aliased to int; its data loader
gets a collate function that indexes the in-memory tensors (its default
collates example by example, a Python cost per example that the fixed arms,
which index the tensors, do not pay); and rank 0 refits its throughput model every --fit-every steps, which
AdaptDL does every 30 s, a cadence for jobs of hours (this one trains for
seconds, so it would never fit and never adapt). What is not changed: it
re-decides the batch size where it was built to, at the start of each pass over
the data, and each pass before the first fit runs at the starting batch.

AdaptDL and its dependencies are installed by this script from PyPI into
$BUILD/bench/adaptdl-venv (with the system's numpy and torch), for the
benchmark only; never a dependency of jizhi.

Usage: python3 bench/schedulers_batchsize_adaptdl.py [--quick] [--seeds 5]
       [--first-seed 1] [--replicas 3] [--batches 128,256,512,1024]
       [--sweep 0.5,1,2] [--starts 64,512] [--fit-every 20] [--json FILE]
(part `batchsize_adaptdl` of `make bench-schedulers`; it merges its medians
into the "batchsize_adaptdl" section of $BENCH_SCHED_JSON)
"""
import argparse
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ensure_venv, median_replica, replica_factor, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):  # the workers start in a scratch folder
    BUILD = os.path.join(ROOT, BUILD)
VENV = os.path.join(BUILD, "bench", "adaptdl-venv")
PINS = ["adaptdl==0.2.11"]
DATA = "/usr/share/datasets/fashion-mnist"
TARGET, EPOCHS, VAL, EVAL_SAMPLES, B0, BMAX = 0.88, 8, 5000, 3200, 64, 1024


# ---- the worker: one rank of one arm (runs in the venv) ----

def load_data():
    import numpy as np
    import torch

    def idx(name, header):
        with gzip.open(os.path.join(DATA, name), "rb") as f:
            return np.frombuffer(f.read()[header:], dtype=np.uint8)
    x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype(np.float32)
    y = idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64)
    x = (x / 255.0 - 0.2860) / 0.3530  # the Fashion-MNIST mean/std, as jizhi-train
    perm = np.random.RandomState(0x6a69).permutation(len(x))  # a fixed split
    val, train = np.sort(perm[-VAL:]), np.sort(perm[:-VAL])
    return (torch.from_numpy(x[train]), torch.from_numpy(y[train]),
            torch.from_numpy(x[val]), torch.from_numpy(y[val]))


def worker(cfg):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    rank = cfg["rank"]
    X, Y, Xv, Yv = load_data()
    torch.manual_seed(cfg["seed"])
    net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(net.parameters(), lr=cfg["lr"], momentum=0.9)
    rec = {"evals": [], "batch": [], "hit": None}
    clock = {"train": 0.0, "mark": 0.0, "since": 0, "samples": 0, "steps": 0}

    def pause():
        clock["train"] += time.perf_counter() - clock["mark"]

    def resume():
        clock["mark"] = time.perf_counter()

    def after_step(b):
        """Counts a step of global batch b; evaluates every EVAL_SAMPLES. True at
        the target."""
        clock["steps"] += 1
        clock["samples"] += b
        clock["since"] += b
        if not rec["batch"] or rec["batch"][-1][1] != b:
            rec["batch"].append((clock["steps"] - 1, b))
        if clock["since"] < EVAL_SAMPLES:
            return False
        pause()
        clock["since"] = 0
        with torch.no_grad():  # every rank the whole set: the same weights, the
            acc = (net(Xv).argmax(1) == Yv).float().mean().item()  # same verdict
        rec["evals"].append((clock["steps"], clock["samples"], clock["train"], acc))
        resume()
        if acc >= TARGET:
            rec["hit"] = {"steps": clock["steps"], "samples": clock["samples"],
                          "time": clock["train"]}
            return True
        return False

    if cfg["kind"] == "fixed":
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % cfg["port"],
                                rank=rank, world_size=2)
        model = torch.nn.parallel.DistributedDataParallel(net)
        B, n = cfg["batch"], len(X)
        half = B // 2
        resume()
        done = False
        for epoch in range(EPOCHS):
            g = torch.Generator().manual_seed(cfg["seed"] * 1000 + epoch)
            perm = torch.randperm(n, generator=g)
            for s in range(0, n - B + 1, B):
                ids = perm[s + rank * half:s + (rank + 1) * half]
                opt.zero_grad()
                F.cross_entropy(model(X[ids]), Y[ids]).backward()
                opt.step()
                if after_step(B):
                    done = True
                    break
            if done:
                break
    else:
        import numpy as np
        if not hasattr(np, "int"):
            np.int = int  # numpy 1.24 removed it; adaptdl's goodput.py still uses it
        os.environ.update({"ADAPTDL_MASTER_ADDR": "127.0.0.1",
                           "ADAPTDL_MASTER_PORT": str(cfg["port"]),
                           "ADAPTDL_NUM_REPLICAS": "2", "ADAPTDL_NUM_NODES": "1",
                           "ADAPTDL_REPLICA_RANK": str(rank)})
        import adaptdl.torch as adl
        import adaptdl.torch._metrics as adl_metrics
        adl.init_process_group("gloo")
        model = adl.AdaptiveDataParallel(net, opt)
        loader = adl.AdaptiveDataLoader(list(range(len(X))), batch_size=cfg["batch"],
                                        shuffle=True,
                                        collate_fn=lambda ids: (X[ids], Y[ids]))
        loader.autoscale_batch_size(BMAX, local_bsz_bounds=(8, BMAX // 2))
        rec["fits"] = 0
        resume()
        done = False
        for _ in adl.remaining_epochs_until(EPOCHS):
            for x, y in loader:
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
                b = loader.current_batch_size
                if after_step(b):
                    done = True
                    break
                if rank == 0 and clock["steps"] % cfg["fit_every"] == 0:
                    pause()  # the bench's cadence, not AdaptDL's: left out of the time
                    try:
                        adl_metrics._fit_perf_params()
                        rec["fits"] += 1
                    except (AssertionError, ValueError):
                        pass  # one size profiled so far: nothing to fit yet
                    resume()
            if done:
                break
    pause()
    if rank == 0:
        with open(cfg["out"], "w") as f:
            json.dump(rec, f)
    # leave without tearing down the process groups: a peer may already be gone
    sys.stdout.flush()
    os._exit(0)


# ---- the driver (the system python) ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_arm(py, tmp, kind, seed, lr, batch, args):
    out = os.path.join(tmp, "out-%s-%d-%d-%.8g.json" % (kind, seed, batch, lr))
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    procs = []
    for rank in range(2):
        cfg = {"rank": rank, "kind": kind, "seed": seed, "lr": lr, "batch": batch,
               "port": port, "out": out, "fit_every": args.fit_every}
        procs.append(subprocess.Popen([py, os.path.abspath(__file__), "--worker",
                                       json.dumps(cfg)], env=env, cwd=tmp,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True))
    errs = []
    for p in procs:
        try:
            _, e = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            p.kill()
            _, e = p.communicate()
        errs.append(e)
    if not os.path.exists(out):
        sys.stderr.write("adaptdl: %s seed %d lr %g batch %d: no result:\n%s\n" % (
            kind, seed, lr, batch, (errs[0] or "")[-2000:]))
        return None
    with open(out) as f:
        rec = json.load(f)
    hit = rec["hit"]
    return {"kind": kind, "seed": seed, "lr": lr, "batch": batch,
            "time": hit["time"] if hit else None, "samples": hit["samples"] if hit else None,
            "steps": hit["steps"] if hit else None,
            "best": max((e[3] for e in rec["evals"]), default=None),
            "changes": rec["batch"], "fits": rec.get("fits")}


def run_replicas(py, tmp, kind, seed, lr, batch, args):
    """The arm's median replica by time (a miss counts as the slowest)."""
    reps = [run_arm(py, tmp, kind, seed, lr * replica_factor(i)[0], batch, args)
            for i in range(args.replicas)]
    mid = median_replica([r for r in reps if r], "time")
    return dict(mid, lr=lr) if mid else None


def fmt(v, f="%.2f"):
    return "-" if v is None else f % v


def print_row(seed, name, r):
    extra = ""
    if r["kind"] == "adaptdl":
        extra = "; batch (step: B) %s; %s fits" % (
            ", ".join("%d: %d" % (s, b) for s, b in r["changes"]), r["fits"])
    print("%4d %-22s %6s %8s %7s %7s  %s%s" % (
        seed, name, fmt(r["steps"], "%d"), fmt(r["samples"], "%d"), fmt(r["time"]),
        fmt(r["best"], "%.4f"), ", ".join(fmt(t) for t in r["replicas"]), extra))
    sys.stdout.flush()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 seed, 1 replica, fixed 512 and 1024 at c = 0.5 and 1")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--batches", default="128,256,512,1024",
                    help="the fixed grid (64 and 32 were never the best fixed batch of "
                    "this setting in jizhi's bench)")
    ap.add_argument("--sweep", default="0.5,1,2", help="lr factors c of c*0.05*sqrt(B/64)")
    ap.add_argument("--starts", default="64,512",
                    help="AdaptDL's starting batches: 64 at --lr0 (where jizhi's scheduler "
                    "starts), and others at the rate chosen for that fixed batch (AdaptDL "
                    "never goes below its starting batch)")
    ap.add_argument("--lr0", type=float, default=0.025,
                    help="AdaptDL's rate at batch 64 (jizhi's scheduler starts at the rate "
                    "best for fixed 64 in its sweep, 0.025)")
    ap.add_argument("--fit-every", type=int, default=20,
                    help="steps between refits of AdaptDL's throughput model")
    ap.add_argument("--json", default=os.environ.get("BENCH_SCHED_JSON"),
                    help="merge the medians into this JSON object (key batchsize_adaptdl)")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.replicas, args.batches, args.sweep = 1, 1, "512,1024", "0.5,1"
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("adaptdl: SKIPPED: Fashion-MNIST not found in %s" % DATA)
        return 0
    py, why = ensure_venv(VENV, PINS, "import numpy; numpy.int = int; import adaptdl.torch",
                          "adaptdl")
    if not py:
        print("adaptdl: SKIPPED: %s" % why)
        return 0
    batches = [int(b) for b in args.batches.split(",")]
    sweep = [float(c) for c in args.sweep.split(",")]
    starts = [int(b) for b in args.starts.split(",")]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    print("adaptdl: Fashion-MNIST MLP 784-256-256-10, 2 ranks (gloo, 1 thread each), SGD "
          "momentum 0.9, target val_acc %.2f on %d held out, eval every %d samples, at "
          "most %d epochs; %d seed(s), %d replica(s) an arm; load %.1f" % (
              TARGET, VAL, EVAL_SAMPLES, EPOCHS, len(seeds), args.replicas,
              os.getloadavg()[0]))
    print("%-4s %-22s %6s %8s %7s %7s  %s" % ("seed", "arm", "steps", "samples", "time-s",
                                             "best", "replicas (s) / batch changes"))
    inf = float("inf")

    def t(r):
        return inf if not r or r["time"] is None else r["time"]

    def lr_of(b, c):
        return round(c * 0.05 * (b / 64) ** 0.5, 6)
    fixed, adapt = {}, {}  # (seed, batch, c) -> row; (seed, start) -> row
    with tempfile.TemporaryDirectory(prefix="jz-bench-adaptdl-") as tmp:
        for seed in seeds:  # every rate on every seed first (jizhi's --sweep-all)
            for b in batches:
                for c in sweep:
                    r = fixed[(seed, b, c)] = run_replicas(py, tmp, "fixed", seed,
                                                           lr_of(b, c), b, args)
                    if r:
                        print_row(seed, "fixed%d-lr%g" % (b, r["lr"]), r)
        # each batch's rate: the c with the least median time over the seeds
        rate = {b: min(sweep, key=lambda c: statistics.median(
            t(fixed[(s, b, c)]) for s in seeds)) for b in batches}
        print("rates chosen over all seeds: " + ", ".join(
            "%d: %g" % (b, lr_of(b, rate[b])) for b in batches))
        for seed in seeds:
            for b0 in starts:
                lr = args.lr0 if b0 == B0 else lr_of(b0, rate[b0]) if b0 in rate else None
                if lr is None:
                    print("adaptdl: start %d is not in --batches: no rate for it" % b0)
                    continue
                r = adapt[(seed, b0)] = run_replicas(py, tmp, "adaptdl", seed, lr, b0, args)
                if r:
                    print_row(seed, "adaptdl-from%d-lr%g" % (b0, lr), r)
    # plain DDP's step time over the batch, t(B) = a + b B, least squares over the
    # fixed arms (their median replicas): AdaptDL's steps priced at it separate
    # its decisions from its own per-step costs
    pts = [(b, r["time"] / r["steps"]) for (_, b, _), r in fixed.items()
           if r and r["time"] is not None]
    mb, mt = statistics.mean(p[0] for p in pts), statistics.mean(p[1] for p in pts)
    sxx = sum((p[0] - mb) ** 2 for p in pts)
    slope = sum((p[0] - mb) * (p[1] - mt) for p in pts) / sxx if sxx > 0 else 0
    icpt = mt - slope * mb
    print("plain DDP step time: %.2f ms + %.4f ms per example (fit over the fixed arms)" % (
        icpt * 1e3, slope * 1e3))

    def priced(r):
        """AdaptDL's steps to the target at plain DDP's step times."""
        if not r or r["steps"] is None:
            return inf
        ch = r["changes"] + [(r["steps"], 0)]
        return sum((ch[i + 1][0] - ch[i][0]) * (icpt + slope * ch[i][1])
                   for i in range(len(ch) - 1))
    summary = {"seeds": seeds, "replicas": args.replicas, "target": TARGET,
               "ddp_step_s": {"fixed": icpt, "per_example": slope},
               "rates": {str(b): lr_of(b, rate[b]) for b in batches}, "per_seed": []}
    ratios = {(b0, m): [] for b0 in starts for m in ("time", "priced")}

    def opt(x):
        return x if x < inf else None
    for s in seeds:
        best_b = min(batches, key=lambda b: t(fixed[(s, b, rate[b])]))
        bt = t(fixed[(s, best_b, rate[best_b])])
        row = {"seed": s, "best_fixed_batch": best_b, "best_fixed_time_s": opt(bt)}
        for b0 in starts:
            r = adapt.get((s, b0))
            for m, v in (("time", t(r)), ("priced", priced(r))):
                ratios[(b0, m)].append(v / bt if bt < inf else inf)
                row["adaptdl_from%d_%s_s" % (b0, m)] = opt(v)
        summary["per_seed"].append(row)
        print("seed %d: best fixed %d (%s s); adaptdl (time, at DDP's step times) %s" % (
            s, best_b, fmt(opt(bt)), ", ".join(
                "from %d %sx, %sx" % (b0, fmt(opt(ratios[(b0, "time")][-1])),
                                      fmt(opt(ratios[(b0, "priced")][-1])))
                for b0 in starts)))
    for b0 in starts:
        for m, what in (("time", "time"), ("priced", "its steps at plain DDP's step times")):
            med = statistics.median(ratios[(b0, m)])
            summary["adaptdl_from%d_%s_ratio_to_best_fixed" % (b0, m)] = opt(med)
            print("adaptdl from %d, %s to %.2f over the best fixed batch's time, median "
                  "over seeds: %s (per seed %s)" % (
                      b0, what, TARGET, fmt(opt(med)),
                      ", ".join(fmt(opt(x)) for x in ratios[(b0, m)])))
    if args.json:
        write_json(args.json, "batchsize_adaptdl", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
