"""bench/batchsize_ceiling.py - how much the batch-size scheduler's moves can
win at best, chosen in hindsight: the ceiling its online decisions are
judged under. A benchmark, not a test: nothing is asserted.

The setting is the headline of bench/schedulers_batchsize.py (`mlp-2r`: the
MLP on two data-parallel ranks, all 55000 examples, SGD with momentum 0.9,
evaluated every 3200 samples, target val_acc 0.88). jizhi-train runs
standalone under mpirun. A schedule is run in stages: each stage trains to a
step and saves a checkpoint (--save), the next resumes from it (--resume)
with the new batch size and lr given as the trial's params (JIZHI_PARAMS,
which win over the checkpoint's as after a live load). Runs are
deterministic, so one run per schedule and seed is enough.

Schedules, per seed, each against the fixed batch B at lr (the best fixed
batch of the scheduler bench and its rate):

  grow S     B at lr to step S, then 2B with the lr held to the end (the
             scheduler's plateau move: lr/B halves at a cheaper cost per
             example), for every S of --switch
  hot S      B at 2 lr to step S, 2B at 2 lr to step S + --hold, then 2B at
             lr (a hotter start and two annealing moves)
  halve S    B at lr to step S, then B at lr/2 (the plateau rule's other move,
             the one it makes at `max`: a fixed batch with its lr halved once)

The measure is the scheduler bench's profiled time: the steps at each batch
size times that size's step time from a step-time curve measured first. The
table gives each schedule's time to the target over the fixed batch's; the
summary the median over seeds of each schedule, and of each seed's best
schedule (the oracle: the switch point chosen per seed in hindsight).

The scheduler bench's robust measure, here too: with --replicas R every
schedule (and the fixed batch) runs R times, replica k with all its rates
times 1 + 1e-4 k (bench/benchlib.py), and its time is its median replica's;
with --best SEED:B:LR,... each seed's ratios are over that seed's best fixed
batch B at LR (what the scheduler bench found, every rate swept on every
seed), run here with the same replicas on the same curve, instead of over
fixed --batch at --lr.

    BUILD=build python3 bench/batchsize_ceiling.py [--seeds 5] [--first-seed 1]
        [--batch 512] [--lr 0.070711] [--switch 108,162,216,270,324] [--hold 108]
        [--replicas 3] [--best 6:512:0.07071067811865475,...] [--link 1gbit]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import schedulers_batchsize as sb  # noqa: E402  (the bench this one bounds)

REPORT = re.compile(r"jizhi: step (\d+) val_acc=(\S+)")


def run_stage(tmp, args, seed, batch, lr, until, resume=None, params=None):
    """One stage under mpirun to step `until` (0: to the end); returns its
    checkpoint's path and its val_acc reports [(step, value)]."""
    save = os.path.join(tmp, "ck-%d-%d-%g-%d" % (seed, batch, lr, until))
    cmd = sb.base_cmd("mlp", seed, batch, args) + ["--batch-size", str(batch), "--lr", repr(lr)]
    cmd += ["--max-steps", str(until), "--save", save] if until else []
    cmd += ["--resume", resume] if resume else []
    e = sb.env()
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    launch = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "-np", "2"]
    if params:
        e["JIZHI_PARAMS"] = json.dumps(params)
        launch += ["-x", "JIZHI_PARAMS"]
    p = subprocess.run(launch + cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        raise SystemExit("ceiling: seed %d, batch %d to step %d failed (rc %d): %s" % (
            seed, batch, until, p.returncode, p.stderr[-800:]))
    evals = [(int(m.group(1)), float(m.group(2))) for m in map(REPORT.match, p.stderr.splitlines())
             if m]
    return save, evals


def schedule_time(tmp, args, seed, stages):
    """Profiled seconds to the target of a schedule [(batch, lr, until)], the
    last stage's until 0 (to the end), the median of --replicas runs with
    jittered rates; None (a miss) counts as the slowest."""
    reps = []
    for i in range(args.replicas):
        f, _ = benchlib.replica_factor(i)
        reps.append({"t": one_schedule_time(tmp, args, seed,
                                            [(b, lr * f, u) for b, lr, u in stages])})
    return benchlib.median_replica(reps, "t")["t"]


def one_schedule_time(tmp, args, seed, stages):
    """One run of schedule_time's: None if it never reaches the target."""
    ck, start, total = None, 0, 0.0
    for i, (batch, lr, until) in enumerate(stages):
        params = {"batch_size": batch, "lr": lr} if i else None
        ck, evals = run_stage(tmp, args, seed, batch, lr, until, ck, params)
        hit = next((s for s, v in evals if v >= args.target and s > start), None)
        if hit is not None:
            return total + (hit - start) * sb.step_ms(args.curve, batch) / 1e3
        if not until:
            return None
        total += (until - start) * sb.step_ms(args.curve, batch) / 1e3
        start = until
    return None


def parse_best(text):
    """SEED:B:LR,... -> {seed: (B, LR)}"""
    out = {}
    for item in text.split(","):
        try:
            seed, b, lr = item.split(":")
            out[int(seed)] = (int(b), float(lr))
        except ValueError:
            raise argparse.ArgumentTypeError("%r: expected SEED:BATCH:LR" % item)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=512, help="the fixed batch B (default 512)")
    ap.add_argument("--lr", type=float, default=0.05 * 8 ** 0.5,
                    help="its rate (default 0.05 sqrt(512/64) = 0.070711, the scheduler "
                    "bench's rate for 512, to the last digit: a rate 1e-4 away is another run)")
    ap.add_argument("--switch", type=lambda s: [int(x) for x in s.split(",")],
                    default=[108, 162, 216, 270, 324], help="the steps S to switch at")
    ap.add_argument("--hold", type=int, default=108,
                    help="hot: steps at 2B and 2 lr before the lr halves (default 108)")
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--link", help="RATE: the ranks over MPI's TCP on loopback shaped to RATE "
                    "each way (the scheduler bench's --link; needs root and tc)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="runs of each schedule at jittered rates, the median kept (default 1)")
    ap.add_argument("--best", type=parse_best, default={},
                    help="SEED:B:LR,...: each seed's best fixed batch and rate to judge "
                    "against (default: --batch at --lr)")
    ap.add_argument("--json", help="write the table and medians here")
    args = ap.parse_args()
    if args.replicas < 1:
        ap.error("--replicas must be at least 1")
    if not os.path.exists(os.path.join(sb.DATA, "train-images-idx3-ubyte.gz")):
        print("ceiling: SKIPPED: Fashion-MNIST not found in %s" % sb.DATA)
        return 0
    # what sb.base_cmd reads: the mlp-2r setting of the scheduler bench
    args.quick, args.subset, args.epochs = False, 0, 8
    args.trainer, args.trainer_args = "jizhi-train", ""
    b, lr = args.batch, args.lr
    with sb.Link(args.link):
        return ceiling(args, b, lr)


def ceiling(args, b, lr):
    sizes = sorted({b, 2 * b} | {bb for bb, _ in args.best.values()})
    args.curve, _ = sb.step_curve("mlp", 2, args, sizes)  # (curve, noise reported)
    print("step-time curve (2 ranks): " + ", ".join(
        "%d: %.2f ms" % (k, v[0]) for k, v in sorted(args.curve.items())))
    names = ["fixed", "fixed 2lr"] + ["grow %d" % s for s in args.switch] + \
        ["hot %d" % s for s in args.switch] + ["halve %d" % s for s in args.switch]
    print("profiled time to val_acc %.2f over %s, per seed (%d replicas):" % (
        args.target, "each seed's best fixed batch (--best)" if args.best else
        "fixed %d at lr %g" % (b, lr), args.replicas))
    print("seed  base      base s  " + "  ".join("%9s" % n for n in names))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="jz-bench-ceiling-") as tmp:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            own = schedule_time(tmp, args, seed, [(b, lr, 0)])
            base = args.best.get(seed, (b, lr))
            fixed = own if base == (b, lr) else schedule_time(tmp, args, seed, [base + (0,)])
            times = [own, schedule_time(tmp, args, seed, [(b, 2 * lr, 0)])]
            times += [schedule_time(tmp, args, seed, [(b, lr, s), (2 * b, lr, 0)])
                      for s in args.switch]
            times += [schedule_time(tmp, args, seed, [(b, 2 * lr, s),
                                                      (2 * b, 2 * lr, s + args.hold),
                                                      (2 * b, lr, 0)])
                      for s in args.switch]
            times += [schedule_time(tmp, args, seed, [(b, lr, s), (b, lr / 2, 0)])
                      for s in args.switch]
            # a schedule that never reaches the target counts as the worst
            rows[seed] = [t / fixed if t and fixed else float("inf") for t in times]
            print("%4d  %-8s  %6s  " % (seed, "%d@%.3g" % base, "%.3f" % fixed if fixed else "-") +
                  "  ".join("%9.2f" % r for r in rows[seed]), flush=True)
    med = {n: statistics.median(r[i] for r in rows.values()) for i, n in enumerate(names)}
    oracle = statistics.median(min(r[2:]) for r in rows.values())
    print("medians over %d seeds: " % len(rows) +
          ", ".join("%s %.2f" % (n, m) for n, m in med.items()) +
          "; each seed's best schedule (oracle) %.2f" % oracle)
    if args.json:
        with open(args.json, "w") as f:
            # a miss (inf) is written as null: JSON has no infinity
            fin = lambda x: x if x != float("inf") else None  # noqa: E731
            json.dump({"batch": b, "lr": lr, "target": args.target, "schedules": names,
                       "replicas": args.replicas,
                       "best": {s: list(v) for s, v in args.best.items()},
                       "ratios": {s: [fin(x) for x in r] for s, r in rows.items()},
                       "medians": {n: fin(m) for n, m in med.items()},
                       "oracle_median": fin(oracle)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
