"""bench/schedulers_batchsize.py - the batch-size scheduler against every
fixed batch size of a grid, each at its best learning rate, and against
linear scaling at a large batch (part of `make bench-schedulers`). A
benchmark, not a test: nothing is asserted.

Measure, to the first val_acc >= target: the samples; the profiled time,
the steps taken at each batch size times that size's step time from the
step-time curve measured first (standalone runs of the same setting, each
size at the faster of two runs, the lower quartile of its reports: the
machine's speed at that size, which the load of a shared machine cannot
reach into the arms' own numbers; as in Pollux's evaluation, which replays
measured throughput; evaluation and start-up are left out, the same for
every arm); the wall time from the trial's start; and the trainer's
CPU-seconds by then (polled from /proc every 0.25 s). On Fashion-MNIST with
jizhi-train (SGD, momentum 0.9, one thread per rank: with two, OpenBLAS's
waiting threads counted CPU time that grew with the load), evaluated every
3200 samples (--eval-every-samples, whatever the batch size). The anchor is Pollux's goodput (Qiao et al.,
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
                move). With --sweep-all (the default for mlp-2r outside
                --quick) every seed runs every c and each
                B gets the c with the fewest samples in the median over the
                seeds (the fixed arms of all seeds run first); the other
                rates are not baselines. best_fixed per seed: the cheapest fixed arm by the
                profiled time (--rank profile, the default: at load 9-15
                the wall time and CPU-s of one 2-rank run moved up to 10x),
                the trainer's CPU-s (--rank cpu) or wall time (--rank time).
  linear        B = the grid's largest, lr = 0.05 * B/64 with 0.5 epochs
                of warmup (Goyal et al.).
  batchsize     scheduler batchsize from B0 = 64 (--sched-start) at the lr
                that was best for fixed B0 on the first seed (the fixed arms' hindsight; run
                after them), range 32..1024 (--sched-min, --sched-max), "probe_interval": 50 (the
                first change and the one after an exploring x2 wait for the
                measurements only, not for the 200-step interval),
                AdaScale, "grow_only": true (measured: with the default
                the batch went down as often as up, e.g. 128 -> 32 after a
                noisy throughput fit, and such a shrink cost accuracy),
                "throughput": "cpu" (step costs from the trainer's
                step_cpu_s: on a shared host wall-clock step times taken at
                different sizes at different moments compare the load),
                "momentum": 0.9 (the trainer's; the efficiency uses
                B_simple / (1 - 0.9)); its decisions (batch_size and lr
                reports) are plotted to $BUILD/bench/<arm>-<model>-s<seed>.svg.
                "plateau_window": 16, "plateau_delta": 0.01: once the val_acc
                trend over the last 16 evaluations (51200 samples) gains less
                than 0.01, the batch doubles with the lr held (annealing:
                lr/B halves), at 1024 the lr halves instead; goodput stops.
                The plateau rule's instructions are listed under each arm
                (the step it decided at: batch or lr).
  batchsize-goodput  the same without the plateau rule (goodput only: the
                scheduler before the plateau rule).
  fixed-plateau  the baseline the plateau rule must also face: the seed's
                best fixed batch at its lr, the lr halved on the same plateau
                rule (the scheduler with min = max = that batch: a fixed batch
                with ReduceLROnPlateau).
  batchsize-default  the scheduler's defaults (wall-clock throughput, may
                shrink), with "momentum": 0.9.

Replicas (--replicas R; default 3 for mlp-2r outside --quick, else 1): one
trial's time to the target is chaotic. On two ranks, fixed 512 at lr
0.070711 reached 0.88 on seeds 1-10 in a median of 321 steps, and at
0.070704 and 0.070718 (1e-4 either side) in 415 and 394; seed 4 moved
from 293 to 460 steps. With R > 1 every arm, fixed or scheduled, runs R
times at lr x (1 + 1e-4 k), k = 0, -1, 1, ... (the scheduler arms: their
lr0), and its measures are those of its median replica, so that neither
side's number is one draw of that chaos; the first seed's sweep compares
medians too. Replica k = 0 is the run of R = 1.

Settings: a model, and with "-2r" two data-parallel ranks (trial.ranks 2,
mpirun; every step all-reduces the gradient, a fixed cost per step, so
throughput grows with the batch: Pollux's setting). With --link RATE the two ranks talk over
MPI's TCP on loopback shaped to RATE each way by tc (two hosts on one
link) instead of shared memory. Models: the MLP (256,256) with 5 seeds, and a small CNN (channels 8,16,
evaluated with precise BN, target 0.72) with 1 seed (--cnn-seeds N for more) and its own sweep
(--cnn-sweep, c = 1, 2, 4) in the full run and not in --quick: a CNN
step costs ~20x an MLP step on these 2 cores. Wall times depend on the
machine's load (it is shared); samples do not. Writes the "batchsize"
section of $BENCH_SCHED_JSON (medians over seeds, MLP).

    python3 bench/schedulers_batchsize.py [--quick] [--seeds 5] [--first-seed 1] [--models mlp,mlp-2r,cnn]
        [--target 0.88 --subset 0 --epochs 8] [--lock /tmp/jizhi-bench.lock]
        [--batches 256,512,1024,2048 --sched-max 2048] [--link 10gbit]
        [--sched-start 256] [--throughput cpu|wall] [--lr-rule adascale|sqrt|linear|none]
        [--sched-opts JSON] [--keep DIR]

On a machine with an NVIDIA GPU (`make cuda` built jizhi-train-cuda), the
same comparison on the GPU backend (its step-time curve, printed first, is
the question there: on the H200 of trainer/README.md its throughput stopped
growing at 0.5-0.7 M samples/s):

    python3 bench/schedulers_batchsize.py --models mlp --trainer jizhi-train-cuda
        --trainer-args "--backend cuda" --throughput wall --rank time
        --batches 256,512,1024,2048,4096,8192 --sched-min 256 --sched-start 256
        --sched-max 8192 --sweep 1,2 --arms fixed,batchsize --seeds 2 --goal 0.8

(scripts/gpu-check.sh runs this, its item 6, under a time limit; wall time
to the target is the measure there: a GPU step's CPU time is not its cost).
The step-time curve covers the grid and every power of two the scheduler
may use (curve_sizes). The bench says, and its JSON records
(noise_scale_reported), when the trainer reported no gradient-noise inputs:
then the goodput rule cannot move the batch and only the plateau rule does
(jizhi-train-cuda's --backend cuda step reports them on one rank since
2026-12-06, not yet seen on a GPU; with several ranks it does not).
--dry-run prints the curve's sizes and first command and the first seed's
arm specs, and trains nothing. The JSON's per_seed lists, by the --rank
measure, each seed's best fixed batch, its time, the scheduler's and their
ratio; --goal R judges their median against R (printed, and "goal" in the
JSON).
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import build_dir, jizhi_env, median_replica, replica_factor, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = build_dir()
JIZHI = os.path.join(BUILD, "bin", "jizhi")
DATA = "/usr/share/datasets/fashion-mnist"
EVAL_SAMPLES = 3200


def env():
    return jizhi_env(BUILD)


MODELS = {
    # name: trainer flags, train subset, target, max epochs
    "mlp": (["--model", "mlp", "--hidden", "256,256"], 30000, 0.86, 4),
    # evaluated with precise BN (--bn-recompute 4): with training's running
    # averages this CNN's val_acc jumped 0.21-0.36 within the first epoch
    # (PyTorch's same model 0.27-0.60), so the first eval >= target was
    # chance; with it val_acc rises to 0.72-0.76 in 3 epochs at B=32
    "cnn": (["--model", "cnn", "--channels", "8,16", "--bn-recompute", "4"], 10000, 0.72, 3),
}


# per setting, unless given on the command line: two ranks train on all the
# data to 0.88, where the noise scale is larger (the setting of the
# documented numbers), each arm the median of 3 replicas and each batch's
# rate swept on every seed (one trial's time to the target is chaotic)
SETTING_DEFAULTS = {"mlp-2r": {"subset": 0, "target": 0.88, "epochs": 8, "replicas": 3,
                               "sweep_all": True}}


# --link: MPI's TCP ports (a u32 match of 0xb300/0xff00: 45824-46079)
LINK_PORT_MIN, LINK_PORT_RANGE = 45824, 256


class Link:
    """--link RATE (e.g. 10gbit): the ranks as two hosts on a RATE link, each
    way: MPI over TCP on loopback (btl tcp,self, its ports pinned), their
    traffic shaped by a tc htb class per direction; every other loopback
    flow is left alone. Needs root and tc; the qdisc is removed on exit."""

    def __init__(self, rate):
        self.rate, self.set = rate, False

    def tc(self, *a):
        p = subprocess.run(["tc"] + list(a), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if p.returncode:
            raise SystemExit("batchsize: --link %s: tc %s: %s" % (self.rate, " ".join(a),
                                                                 p.stderr.strip()))
        return p.stdout

    def __enter__(self):
        if not self.rate:
            return self
        if not shutil.which("tc"):
            raise SystemExit("batchsize: --link needs tc (Debian package iproute2)")
        if not self.tc("qdisc", "show", "dev", "lo").startswith("qdisc noqueue"):
            raise SystemExit("batchsize: --link: lo already has a qdisc (tc qdisc show dev "
                             "lo); not replacing it")
        self.set = True
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # __exit__ runs
        try:
            self.tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1",
                    "r2q", "1000")
            self.tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb",
                    "rate", "100gbit")
            port = "0x%x" % LINK_PORT_MIN
            for cls, way in (("1:10", "dport"), ("1:11", "sport")):
                self.tc("class", "add", "dev", "lo", "parent", "1:", "classid", cls, "htb",
                        "rate", self.rate, "ceil", self.rate, "burst", "64k", "cburst", "64k")
                self.tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio",
                        "1", "u32", "match", "ip", way, port, "0xff00", "flowid", cls)
        except SystemExit:
            self.__exit__()
            raise
        os.environ.update(OMPI_MCA_btl="tcp,self",
                          OMPI_MCA_btl_tcp_port_min_v4=str(LINK_PORT_MIN),
                          OMPI_MCA_btl_tcp_port_range_v4=str(LINK_PORT_RANGE))
        return self

    def __exit__(self, *exc):
        if self.set:
            subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"],
                           stderr=subprocess.DEVNULL)
            self.set = False


def split_setting(setting):
    """'mlp-2r' -> ('mlp', 2): a model of MODELS and its data-parallel ranks."""
    model, _, r = setting.partition("-")
    if model not in MODELS or (r and not (r.endswith("r") and r[:-1].isdigit())):
        raise SystemExit("batchsize: unknown setting %r (mlp, cnn, optionally -<N>r for N "
                         "ranks, e.g. mlp-2r)" % setting)
    return model, int(r[:-1]) if r else 1


def base_cmd(model, seed, batch, args):
    flags, subset, _, epochs = MODELS[model]
    epochs = args.epochs or epochs
    subset = subset if args.subset is None else args.subset
    if args.quick:
        subset = subset // 3
    return [args.trainer, "--dataset", "fashion-mnist", "--train-subset", str(subset),
            "--val-size", "5000", "--epochs", str(epochs), "--eval-every-samples",
            str(EVAL_SAMPLES), "--log-every", "10", "--threads", "1",
            "--quiet", "--seed", str(seed), "--momentum", "0.9"] + flags + \
        shlex.split(args.trainer_args)


def target_of(model, args):
    if args.target:
        return args.target
    return MODELS[model][2] - (0.03 if args.quick else 0)


def step_curve(model, ranks, args, batches):
    """The trainer's step time over batch sizes: {B: (wall ms, CPU ms of rank 0, total
    CPU us per example)} from standalone runs (medians of its reports after the
    first two), the setting's ranks under mpirun. What the scheduler's throughput
    fit sees, measured apart so it can be judged. Also whether any run reported
    grad_sqnorm_small (the scheduler's noise-scale input: a trainer that never
    reports it leaves the goodput rule blind; jizhi-train-cuda's --backend cuda
    step measures it on one rank only). Returns (curve, noise_reported)."""
    out, noise = {}, False
    # every size twice, up then down: a size is taken at its faster run (on
    # the shared machine one run at 1024 took 469 ms a step, 5 ms in others)
    for b in list(batches) + list(reversed(batches)):
        steps = max(40, 30000 // b)
        cmd = base_cmd(model, 1, b, args) + ["--batch-size", str(b), "--max-steps", str(steps),
                                             "--eval-every-samples", "0", "--epochs", "1000"]
        if ranks > 1:
            cmd = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "-np", str(ranks)] + \
                cmd
        e = env()
        e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        p = subprocess.run(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        sps, cpu = [], []
        for line in p.stderr.splitlines():
            if line.startswith("jizhi: step ") and "=" in line:
                k, _, v = line.split()[-1].partition("=")
                if k == "samples_per_s":
                    sps.append(float(v))
                elif k == "step_cpu_s":
                    cpu.append(float(v))
                elif k == "grad_sqnorm_small":
                    noise = True
        if len(sps) < 3 or len(cpu) < 3:
            sys.stderr.write("step curve B=%d: no reports (rc %d): %s\n" % (
                b, p.returncode, p.stderr[-800:]))
            continue
        # the lower quartile: a report spans 10 steps, and the other jobs of a
        # shared machine only ever slow a step down
        w = sorted(sps[2:])[len(sps[2:]) * 3 // 4]
        c = sorted(cpu[2:])[len(cpu[2:]) // 4]
        if b not in out or 1e3 * b / w < out[b][0]:
            out[b] = (1e3 * b / w, 1e3 * c, 1e6 * c * ranks / b)
    return out, noise


def curve_sizes(args):
    """The batch sizes of the step-time curve: the grid and every power of two
    the scheduler arms may use, from the smaller of --sched-min and the grid's
    smallest to the larger of --sched-max and the grid's largest (no size an
    arm never runs: on a GPU the grid starts at 256)."""
    lo = min([args.sched_min] + args.batches)
    hi = max([args.sched_max] + args.batches)
    pow2 = [2 ** k for k in range(0, 31) if lo <= 2 ** k <= hi]
    return sorted(set(pow2 + args.batches))


def arm_spec(name, model, seed, kind, batch, lr, args):
    cmd = base_cmd(model, seed, batch, args)
    if kind.startswith("batchsize") or kind == "fixed-plateau":
        lo, hi = (batch, batch) if kind == "fixed-plateau" else (args.sched_min, args.sched_max)
        sched = {"type": "batchsize", "seed": seed, "min": lo, "max": hi, "interval": 200,
                 "warmup": args.warmup,
                 # the first change, and the one after an exploring change, need
                 # only the noise and step-time measurements (the default waits
                 # the full interval, 200 steps, for each)
                 **({} if kind == "batchsize-default" else {"probe_interval": 50}),
                 "throughput": "wall" if kind == "batchsize-default" else args.throughput,
                 **({"lr_rule": args.lr_rule} if args.lr_rule else {}),
                 "grow_only": kind != "batchsize-default",
                 # the trial's SGD momentum (a flag here, not a param): the
                 # efficiency uses B_simple / (1 - 0.9)
                 "momentum": 0.9,
                 # annealing once the val_acc trend flattens (not in the
                 # goodput-only and default arms)
                 **({"plateau_window": args.plateau[0], "plateau_delta": args.plateau[1]}
                    if kind in ("batchsize", "fixed-plateau") else {}),
                 **(args.sched_opts if kind == "batchsize" else {})}
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
            "trial": dict({"command": cmd, "timeout_s": 3600, "retries": 0},
                          **({"ranks": args.ranks} if args.ranks > 1 else {}))}


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
        if is_trainer(q, comm.get(q, "")):
            total += ticks[q]
        todo += kids.get(q, [])
    return total / os.sysconf("SC_CLK_TCK")


def is_trainer(pid, comm):
    """Whether pid runs jizhi-train. The trainer re-executes itself to pick
    its BLAS kernels before the BLAS starts (common/blaskern.c); until
    0eaf1c1 it ran /proc/self/exe, so its comm was "exe", not its name, and
    every arm's CPU-s read 0. argv[0] keeps the name either way, and comm
    holds at most 15 characters ("jizhi-train-cud")."""
    if comm.startswith("jizhi-train"):
        return True
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return False
    return os.path.basename(argv0).startswith("jizhi-train")


def step_ms(curve, b):
    """The profiled wall time of one step at batch b (ms): the step-time curve,
    log-log interpolated between its sizes."""
    import math
    xs = sorted(curve)
    if b in curve:
        return curve[b][0]
    lo = max([x for x in xs if x <= b] or [xs[0]])
    hi = min([x for x in xs if x >= b] or [xs[-1]])
    if lo == hi:
        return curve[lo][0] * b / lo
    f = (math.log(b) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp((1 - f) * math.log(curve[lo][0]) + f * math.log(curve[hi][0]))


class Lock:
    """flock on args.lock (if any) around one timing run: each arm and the
    step-time curve hold it alone, so a long bench never holds it for long."""

    def __init__(self, args):
        self.path, self.f = args.lock, None

    def __enter__(self):
        if self.path:
            import fcntl
            self.f = open(self.path, "a")
            fcntl.flock(self.f, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        if self.f:
            self.f.close()


def profiled_so_far(db, batch, curve):
    """The profiled time of the steps a running arm has reported so far."""
    try:
        sizes = sql(db, "SELECT step, value FROM metrics WHERE name='batch_size' ORDER BY step")
        last = sql(db, "SELECT MAX(step) FROM metrics")[0][0] or 0
    except sqlite3.Error:
        return 0
    total, cur, at = 0.0, batch, 0
    for st, v in sizes:
        total += (st - at) * step_ms(curve, cur)
        cur, at = v, st
    return (total + (last - at) * step_ms(curve, cur)) / 1e3


def run_arm(tmp, name, model, seed, kind, batch, lr, args):
    """Runs one arm until the target (then stops it) or its epochs end. With
    --replicas R, R times, replica k at lr x (1 + JITTER k), and returns the
    replica with the median profiled time (a miss counts as the slowest),
    every replica's in "replicas"; "lr" stays the arm's own."""
    reps = []
    for i in range(args.replicas or 1):
        f, k = replica_factor(i)
        with Lock(args):
            r = run_arm_locked(tmp, name + ("-r%d" % k if k else ""), model, seed, kind, batch,
                               lr * f, args)
        if r is not None:
            reps.append(r)
    mid = median_replica(reps, "profile")
    return dict(mid, lr=lr) if mid else None


def run_arm_locked(tmp, name, model, seed, kind, batch, lr, args):
    target = target_of(model, args)
    d = os.path.join(tmp, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path, db = os.path.join(d, "spec.json"), os.path.join(d, "jizhi.db")
    with open(path, "w") as f:
        json.dump(arm_spec(name, model, seed, kind, batch, lr, args), f)
    p = subprocess.Popen([JIZHI, "run", path, "--db", db, "--slots", str(args.ranks)], cwd=d, env=env(),
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
        if args.cap and profiled_so_far(db, batch, args.curve) > args.cap:
            p.send_signal(signal.SIGINT)  # cannot be the best of this seed any more
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

    def sum_to(step, f):
        # the batch in force at each step: the last reported size before it
        total, cur, last = 0, batch, 0
        for s in sorted(size_at):
            if s > step:
                break
            total += (s - last) * f(cur)
            cur, last = size_at[s], s
        return total + (step - last) * f(cur)

    def samples_to(step):
        return int(sum_to(step, lambda b: b))

    cpu_hit = None
    if first:
        before = [c for t, c in cpu if t <= first[2]]
        cpu_hit = before[-1] if before else None
    changes = sql(db, "SELECT COUNT(*) FROM events WHERE who='batchsize' AND "
                  "kind='instruction' AND detail LIKE '%\"name\":\"batch_size\"%'")[0][0]
    plateau = []  # the plateau rule's instructions: (step, "batch_size" or "lr", value)
    for (detail,) in sql(db, "SELECT detail FROM events WHERE who='batchsize' AND "
                         "kind='instruction' AND detail LIKE '%\"rule\":\"plateau\"%' "
                         "ORDER BY id"):
        d = json.loads(detail)
        plateau.append((d["decision"]["step"], d["name"], d["value"]))
    return {"arm": name, "model": model, "seed": seed, "kind": kind, "batch": batch, "lr": lr,
            "steps": first[0] if first else None,
            "samples": samples_to(first[0]) if first else None,
            "time": first[2] - started if first else None, "cpu": cpu_hit,
            "profile": sum_to(first[0], lambda b: step_ms(args.curve, b)) / 1e3
            if first else None,
            "best": max((v for _, v, _ in evals), default=None), "changes": changes,
            "final_b": sizes[-1][1] if sizes else batch,
            "plateau_at": plateau,
            "changes_at": [(s, int(v)) for (s, v, _), prev in
                           zip(sizes, [batch] + [v for _, v, _ in sizes]) if v != prev],
            "lr_at": [(s, v) for (s, v, _), prev in zip(lrs, [lr] + [v for _, v, _ in lrs])
                      if abs(v - prev) > 1e-9 * max(abs(prev), 1e-12)],
            "trace": {"batch": [(t - started, v) for _, v, t in sizes],
                      "lr": [(t - started, v) for _, v, t in lrs],
                      "val": [(t - started, v) for _, v, t in evals]},
            "load": os.getloadavg()[0]}


def svg_plot(path, title, trace, target):
    """A small SVG of batch size (log2), lr and val_acc over time."""
    W, H, L, R, T, B = 720, 300, 60, 60, 30, 40
    series = [("batch", "#1f77b4", True), ("lr", "#d62728", True), ("val", "#2ca02c", False)]
    # time from the first report (the trainers' start-up before it is the
    # same for every arm and shows nothing)
    ts = [t for k, _, _ in series for t, _ in trace[k]]
    t0 = min(ts, default=0)
    trace = {k: [(t - t0, v) for t, v in trace[k]] for k, _, _ in series}
    tmax = max([t - t0 for t in ts] + [1e-9])
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">%s</text>' % (L, title)]
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R,
                                                                              H - B))
    for i in range(6):
        t = tmax * i / 5
        x = L + (W - L - R) * i / 5
        out.append('<text x="%.0f" y="%d" text-anchor="middle">%.2g s</text>' % (x, H - B + 15,
                                                                                t))
    out.append('<text x="%d" y="%d" text-anchor="end">since the first report</text>' % (
        W - R, H - B + 28))
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
        if k != "val":  # in force to the end
            d.append("L%.1f,%.1f" % (sx(tmax), sy(prev)))
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


def bench_model(tmp, setting, args, plots):
    given = {k: getattr(args, k) for k in ("subset", "target", "epochs", "replicas",
                                           "sweep_all")}
    for k, v in SETTING_DEFAULTS.get(setting, {}).items():
        if getattr(args, k) is None and not args.quick:
            setattr(args, k, v)
    try:
        return bench_setting(tmp, setting, args, plots)
    finally:
        for k, v in given.items():
            setattr(args, k, v)


def bench_setting(tmp, setting, args, plots):
    model, args.ranks = split_setting(setting)
    seeds = args.seeds if model == "mlp" else args.cnn_seeds
    sweep = args.sweep if model == "mlp" else args.cnn_sweep
    target = args.last_target = target_of(model, args)
    rows = []
    best_c = {}
    print("\nbatchsize %s: Fashion-MNIST subset %d, SGD momentum 0.9, %d rank(s) of 1 thread, "
          "target val_acc %.2f, at most %s epochs, eval every %d samples, %d seed(s), %d "
          "replica(s) an arm" % (setting, int(base_cmd(model, 1, 64, args)[4]), args.ranks,
                                 target, base_cmd(model, 1, 64, args)[8], EVAL_SAMPLES, seeds,
                                 args.replicas or 1))
    with Lock(args):
        curve, args.noise_reported = step_curve(model, args.ranks, args, curve_sizes(args))
    if not curve:
        raise SystemExit("batchsize: %s trained at no batch size (its errors are above): "
                         "nothing to measure" % args.trainer)
    args.curve = curve
    print("step time (standalone, median of the reports; CPU-s of rank 0 per step, "
          "CPU-us per example of all ranks; load %.1f):" % os.getloadavg()[0])
    print("  %6s %9s %9s %10s %12s" % ("batch", "wall-ms", "CPU-ms", "CPU-us/ex",
                                        "samples/s"))
    for b, (w, c, pe) in sorted(curve.items()):
        print("  %6d %9.3f %9.3f %10.2f %12.0f" % (b, w, c, pe, 1e3 * b / w))
    if not args.noise_reported:
        print("batchsize: %s reported no gradient-noise inputs (grad_sqnorm_small, "
              "grad_sqnorm_big): the scheduler's goodput rule has no noise scale and "
              "cannot change the batch; only the plateau rule can" % args.trainer)
    sys.stdout.flush()
    print("%4s %-18s %6s %8s %7s %7s %6s %8s %7s %7s %5s" % (
        "seed", "arm", "steps", "samples", "prof-s", "time-s", "CPU-s", "best acc", "changes",
        "final B", "load"))
    def rate(b, c):
        return round(c * 0.05 * (b / 64) ** 0.5, 6)

    def fixed_arms_of(seed):
        # the largest batch first: the cheapest arm so far caps the others
        cs_all = seed == args.first_seed or args.sweep_all
        return [("fixed", b, rate(b, c), "fixed%d-lr%g" % (b, rate(b, c)))
                for b in sorted(args.batches, reverse=True)
                for c in (sweep if cs_all else [best_c.get(b, 1.0)])]

    def chosen(r):
        # with --sweep-all every rate ran on every seed: only the rate picked
        # for the batch is its baseline
        return not args.sweep_all or r["lr"] == rate(r["batch"], best_c.get(r["batch"], 1.0))

    def later_arms(seed):
        # the scheduler starts at B0 (--sched-start, 64) with the lr that
        # was best for fixed B0 in the sweep (the same hindsight the fixed
        # arms get)
        b0 = args.sched_start
        lr0 = args.lr0 or rate(b0, best_c.get(b0, 1.0))
        bl = max(args.batches)
        # this seed's best fixed arm (by profiled time), for the fixed-plateau
        # baseline
        done = [r for r in rows if r["seed"] == seed and r["kind"] == "fixed" and
                r["profile"] is not None and chosen(r)]
        bf = min(done, key=lambda r: r["profile"]) if done else None
        return [("linear", bl, 0.05 * bl / 64, "linear%d" % bl),
                ("batchsize", b0, lr0, "batchsize"),
                ("batchsize-goodput", b0, lr0, "batchsize-goodput"),
                ("batchsize-default", b0, lr0, "batchsize-default")] + \
            ([("fixed-plateau", bf["batch"], bf["lr"], "fixed%d-plateau" % bf["batch"])]
             if bf else [])

    def run_arms(seed, arms):
        if args.only == "sched":
            arms = [a for a in arms if a[0].startswith("batchsize")]
        if args.arms:
            arms = [a for a in arms if a[0] in args.arms.split(",")]
        for kind, b, lr, label in arms:
            r = run_arm(tmp, "%s-%s-s%d" % (setting, label, seed), model, seed, kind, b,
                        lr, args)
            if r is None:
                continue
            r["label"] = label
            rows.append(r)
            if r["profile"] is not None and args.cap_factor:
                args.cap = min(args.cap or float("inf"), args.cap_factor * r["profile"])
            print("%4d %-18s %6s %8s %7s %7s %6s %8s %7d %7.0f %5.1f" % (
                seed, label, fmt(r["steps"], ">6"), fmt(r["samples"], ">8"),
                fmt(r["profile"], ">7.2f"), fmt(r["time"], ">7.1f"), fmt(r["cpu"], ">6.1f"), fmt(r["best"], ">8.4f"),
                r["changes"], r["final_b"], r["load"]))
            if len(r["replicas"]) > 1:
                print("     %s replicas, profiled s (the median above): %s" % (
                    label, ", ".join(fmt(x, ".2f") for x in r["replicas"])))
            if kind.startswith("batchsize") or kind == "fixed-plateau":
                print("     %s decisions (step: batch): %s; lr changes (reported step: lr): %s"
                      % (label, ", ".join("%d: %d" % c for c in r["changes_at"]) or "none",
                         (", ".join("%d: %.4g" % c for c in r["lr_at"][:8]) or "none") +
                         (" ... (%d in all)" % len(r["lr_at"]) if len(r["lr_at"]) > 8
                          else "")))
                print("     %s plateau decisions (step: batch or lr): %s" % (
                    label, ", ".join("%d: %s %.4g" % (st, "batch" if n == "batch_size"
                                                      else "lr", v)
                                     for st, n, v in r["plateau_at"]) or "none"))
            sys.stdout.flush()
            if (kind.startswith("batchsize") or kind == "fixed-plateau") and plots:
                os.makedirs(plots, exist_ok=True)
                svg_plot(os.path.join(plots, "%s-%s-s%d.svg" % (kind, setting, seed)),
                         "%s, %s, seed %d (lr0 %g): batch size (log), lr (log), val_acc "
                         "over time" % (kind, setting, seed, lr), r["trace"], target)

    def pick_rates(seed_list):
        # each batch's rate: the fewest samples to the target, the median over
        # the sweep's seeds (within one batch size the cost is proportional to
        # the samples, which the load does not move: the CPU-s of one run did,
        # up to 1.5x at the same samples); none reached it: the best val_acc
        inf = float("inf")
        for b in args.batches:
            by_lr = {}
            for r in rows:
                if r["kind"] == "fixed" and r["batch"] == b and r["seed"] in seed_list:
                    by_lr.setdefault(r["lr"], []).append(r)
            if not by_lr:
                continue
            med_samples = {lr: statistics.median([r["samples"] or inf for r in rs])
                           for lr, rs in by_lr.items()}
            pick = min(med_samples, key=med_samples.get)
            if med_samples[pick] == inf:
                pick = max(by_lr, key=lambda lr: statistics.median(
                    [r["best"] or 0 for r in by_lr[lr]]))
            best_c[b] = pick / (0.05 * (b / 64) ** 0.5)

    seed_list = list(range(args.first_seed, args.first_seed + seeds))
    if args.sweep_all:
        for seed in seed_list:
            args.cap = None
            run_arms(seed, fixed_arms_of(seed))
        if args.only == "all":
            pick_rates(seed_list)
        for seed in seed_list:
            base = [r["profile"] for r in rows if r["seed"] == seed and r["kind"] == "fixed" and
                    r["profile"] is not None and chosen(r)]
            args.cap = args.cap_factor * min(base) if base and args.cap_factor else None
            run_arms(seed, later_arms(seed))
    else:
        for seed in seed_list:
            args.cap = None
            run_arms(seed, fixed_arms_of(seed))
            if seed == args.first_seed and args.only == "all":
                pick_rates([seed])
            run_arms(seed, later_arms(seed))
    # per seed: the best fixed arm by each measure, the scheduler arms' ratios
    per_seed = []
    for seed in range(args.first_seed, args.first_seed + seeds):
        fixed = [r for r in rows if r["seed"] == seed and r["kind"] == "fixed" and
                 r["steps"] is not None and chosen(r)]
        arm = {k: next((r for r in rows if r["seed"] == seed and r["kind"] == k), None)
               for k in SCHED_KINDS + ("linear",)}
        if not fixed or not arm["batchsize"]:
            print("seed %d: no fixed batch reached the target" % seed if not fixed else
                  "seed %d: the batchsize arm did not run" % seed)
            continue
        best = {m: min((r for r in fixed if r[m] is not None), key=lambda r: r[m],
                       default=None) for m in MEASURES}
        per_seed.append({"seed": seed, "best": best, "arm": arm})
        bt, a = best[args.rank], arm["batchsize"]

        def ratio(r, m):
            return fmt(r[m] / best[m][m], ".2f") if r and r[m] and best[m] else "-"

        print("seed %d: best fixed (by %s) B=%d lr %g, %s samples; batchsize %s samples, "
              "profiled x%s (best B=%d), wall x%s (B=%d), CPU-s x%s (B=%d); goodput-only x%s, "
              "default x%s, fixed-plateau x%s profiled; linear B=%s %s" % (
                  seed, args.rank, bt["batch"], bt["lr"], bt["samples"],
                  fmt(a["samples"], "d") if a["samples"] else "did not reach it",
                  ratio(a, "profile"), best["profile"]["batch"], ratio(a, "time"),
                  best["time"]["batch"], ratio(a, "cpu"),
                  best["cpu"]["batch"] if best["cpu"] else 0,
                  ratio(arm["batchsize-goodput"], "profile"),
                  ratio(arm["batchsize-default"], "profile"),
                  ratio(arm["fixed-plateau"], "profile"),
                  arm["linear"]["batch"] if arm["linear"] else "-",
                  "x%s profiled" % ratio(arm["linear"], "profile") if arm["linear"] and
                  arm["linear"]["steps"] else "did not reach it"))
    return rows, per_seed, curve


# the measures to the target: profiled time (steps x the step-time curve),
# wall time, the trainer's CPU-seconds
MEASURES = ("profile", "time", "cpu")
SCHED_KINDS = ("batchsize", "batchsize-goodput", "batchsize-default", "fixed-plateau")
KEYS = {"profile": "profiled_time_to_target_s", "time": "time_to_target_s",
        "cpu": "cpu_to_target_s", "samples": "samples_to_target"}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(per_seed, rank, goal=None):
    """Medians over seeds; an arm that missed the target counts as infinitely
    slow in its ratios (a median of them may still be finite); null = not
    reached or not run. With goal (--goal R): "goal", the median over seeds
    of the scheduler's ratio to the seed's best fixed arm by the rank
    measure against R ("met" when <= R; a missed target never meets it)."""
    if not per_seed:
        return None
    inf = float("inf")

    def val(r, m):
        return r[m] if r and r[m] is not None else inf

    def med_inf(xs):
        v = statistics.median(xs) if xs else inf
        return None if v == inf else v

    out = {}
    for name, kind in (("jizhi", "batchsize"), ("jizhi_goodput_only", "batchsize-goodput"),
                       ("jizhi_default_options", "batchsize-default"),
                       ("best_fixed_plateau_lr", "fixed-plateau"), ("linear", "linear")):
        got = [p for p in per_seed if p["arm"][kind]]
        if not got:
            continue
        out[name] = {KEYS[m]: med_inf([val(p["arm"][kind], m) for p in got])
                     for m in MEASURES + ("samples",)}
        for m in MEASURES:  # against each seed's best fixed arm by the same measure
            out[name]["%s_ratio_to_best_fixed" % m] = med_inf(
                [val(p["arm"][kind], m) / p["best"][m][m] if p["best"][m] and p["best"][m][m]
                 else inf
                 for p in got])
    bf = [p["best"][rank] for p in per_seed]
    out["best_fixed"] = {KEYS[m]: med(r[m] for r in bf) for m in MEASURES + ("samples",)}
    out["best_fixed"]["batch_size"] = med(r["batch"] for r in bf)
    out["best_fixed"]["batch_sizes"] = [r["batch"] for r in bf]
    out["best_fixed"]["ranked_by"] = rank
    # per seed, by the ranking measure: the scheduler's time, the best fixed
    # arm's, their ratio (null: the scheduler missed the target)
    out["per_seed"] = []
    for p in per_seed:
        b, a = p["best"][rank], p["arm"]["batchsize"]
        out["per_seed"].append({
            "seed": p["seed"], "measure": KEYS[rank],
            "best_fixed_batch": b["batch"] if b else None,
            "best_fixed": b[rank] if b else None,
            "jizhi": a[rank] if a else None,
            "jizhi_final_batch": a.get("final_b") if a else None,
            "ratio": a[rank] / b[rank] if a and a[rank] is not None and b and b[rank]
            else None})
    for m in MEASURES:
        out["best_fixed_by_" + m] = {KEYS[m]: med(p["best"][m][m] for p in per_seed
                                                  if p["best"][m]),
                                     "batch_sizes": [p["best"][m]["batch"] if p["best"][m]
                                                     else None for p in per_seed]}
    # the documented ratios: wall time to the fastest fixed arm, CPU-s to the
    # least-CPU one; and the profiled time to the best fixed arm by it
    out["time_ratio_jizhi_to_best_fixed"] = out["jizhi"]["time_ratio_to_best_fixed"]
    out["cpu_ratio_jizhi_to_least_fixed"] = out["jizhi"]["cpu_ratio_to_best_fixed"]
    out["profiled_ratio_jizhi_to_best_fixed"] = out["jizhi"]["profile_ratio_to_best_fixed"]
    out["seeds"] = len(per_seed)
    if goal is not None:
        med_r = out["jizhi"]["%s_ratio_to_best_fixed" % rank]
        out["goal"] = {"ratio": goal, "measure": KEYS[rank], "median_ratio": med_r,
                       "verdict": "met" if med_r is not None and med_r <= goal else "missed"}
    return out


def goal_line(model, s):
    """The --goal verdict as one line (per seed: ratio and best fixed batch)."""
    g = s["goal"]
    r = lambda x: "%.2fx" % x if x is not None else "did not reach it"
    return ("batchsize %s: the scheduler's %s / each seed's best fixed batch's: median %s over "
            "%d seed(s) (%s): goal <= %gx %s%s" % (
                model, g["measure"], r(g["median_ratio"]), len(s["per_seed"]),
                "; ".join("seed %d %s vs fixed %s" % (p["seed"], r(p["ratio"]),
                                                      p["best_fixed_batch"])
                          for p in s["per_seed"]), g["ratio"], g["verdict"],
                "" if s.get("noise_scale_reported", True) else
                "; the trainer reported no noise scale (only the plateau rule could move "
                "the batch)"))


def dry_run(models, args):
    """--dry-run: what the bench would run, per setting: the step-time curve's
    sizes and its first command, and the first seed's fixed arms (lr from the
    sweep) and scheduler arm as study specs, the setting's defaults applied."""
    for setting in models:
        model, args.ranks = split_setting(setting)
        given = {k: getattr(args, k) for k in ("subset", "target", "epochs")}
        for k, v in SETTING_DEFAULTS.get(setting, {}).items():
            if k in given and getattr(args, k) is None and not args.quick:
                setattr(args, k, v)
        sizes = curve_sizes(args)
        b = sizes[0]
        print("%s: target val_acc %.2f; step-time curve at %s; first: %s" % (
            setting, target_of(model, args), ",".join(map(str, sizes)), " ".join(
                base_cmd(model, 1, b, args) + ["--batch-size", str(b), "--max-steps",
                                               str(max(40, 30000 // b)),
                                               "--eval-every-samples", "0", "--epochs",
                                               "1000"])))
        sweep = args.sweep if model == "mlp" else args.cnn_sweep
        arms = [("fixed", bb, round(c * 0.05 * (bb / 64) ** 0.5, 6)) for bb in
                sorted(args.batches, reverse=True) for c in sweep]
        arms.append(("batchsize", args.sched_start,
                     args.lr0 or round(0.05 * (args.sched_start / 64) ** 0.5, 6)))
        for kind, bb, lr in arms:
            if args.arms and kind not in args.arms.split(","):
                continue
            print(json.dumps(arm_spec("%s-%s%d" % (setting, kind, bb), model, args.first_seed,
                                      kind, bb, lr, args)))
        for k, v in given.items():
            setattr(args, k, v)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, MLP only, half the data")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--cnn-seeds", type=int, default=1,
                    help="seeds of the CNN (default 1: a CNN step costs 10-200x an MLP "
                    "step here)")
    ap.add_argument("--first-seed", type=int, default=1,
                    help="seeds first..first+seeds-1 (the sweep runs on the first); "
                    "other seeds than the reported 1-5, to try a change without "
                    "tuning it on them")
    ap.add_argument("--models", default=None, help="settings: mlp, cnn, mlp-2r (2 ranks), ... "
                    "(default: mlp-2r,mlp,cnn; --quick: mlp)")
    ap.add_argument("--rank", choices=["profile", "cpu", "time"], default="profile",
                    help="the best fixed arm by the profiled time (steps x the step-time "
                    "curve), the trainer's CPU-s or wall time to the target")
    ap.add_argument("--only", choices=["all", "sched"], default="all",
                    help="sched: only the scheduler's arms (after a change to it)")
    ap.add_argument("--arms", help="only these arm kinds (fixed,linear,batchsize,"
                    "batchsize-goodput,batchsize-default,fixed-plateau)")
    ap.add_argument("--plateau", type=lambda s: (int(s.split(",")[0]), float(s.split(",")[1])),
                    default=(16, 0.01), help="W,delta: the plateau rule's window and delta "
                    "(default 16,0.01)")
    ap.add_argument("--warmup", type=int, default=100, help="the scheduler arms' lr warmup "
                    "in steps after a raise (default 100)")
    ap.add_argument("--target", type=float, help="val_acc target (default: the model's)")
    ap.add_argument("--epochs", type=int, help="at most this many epochs (default: the "
                    "model's)")
    ap.add_argument("--subset", type=int, help="training examples (0 = all; default: the "
                    "model's)")
    ap.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")],
                    help="the fixed batch grid (default 32,64,128,256,512,1024: the scheduler's range)")
    ap.add_argument("--sched-min", type=int, default=32,
                    help="the scheduler arms' smallest batch (default 32; the CNN's "
                    "cheapest example is at 16 with the oneDNN convolutions)")
    ap.add_argument("--sched-max", type=int, default=1024,
                    help="the scheduler arms' largest batch (default 1024)")
    ap.add_argument("--sched-start", type=int, default=64,
                    help="the scheduler arms' first batch, at the lr best for that fixed "
                    "batch on the first seed (default 64; put it in --batches)")
    ap.add_argument("--link", help="RATE (tc's units, e.g. 10gbit): the ranks talk over "
                    "MPI's TCP on loopback shaped to RATE each way, two hosts on one link "
                    "(needs root and tc; default: shared memory)")
    ap.add_argument("--cnn-sweep", type=lambda s: [float(x) for x in s.split(",")],
                    default=[1.0, 2.0, 4.0],
                    help="the CNN's lr factors c on its first seed (default 1,2,4: with "
                    "precise BN the CNN did better at c = 4 than 1 at B = 32 and 128)")
    ap.add_argument("--sweep", type=lambda s: [float(x) for x in s.split(",")],
                    help="the lr multipliers c swept on the first seed (default 0.5,1,2)")
    ap.add_argument("--cap", dest="cap_factor", type=float, default=3.0,
                    help="stop an arm once its profiled time passes this multiple of the "
                    "seed's best so far: it cannot be the best (0 = never)")
    ap.add_argument("--throughput", choices=["cpu", "wall"], default="cpu",
                    help="the scheduler arms' step costs (default cpu: step_cpu_s; the "
                    "defaults arm always uses wall)")
    ap.add_argument("--trainer", default="jizhi-train",
                    help="the trainer's program, in $BUILD/bin or on PATH (default "
                    "jizhi-train; jizhi-train-cuda for a GPU)")
    ap.add_argument("--trainer-args", default="",
                    help="flags added to every trainer command (e.g. '--backend cuda'; "
                    "on a GPU give --throughput wall too: a step's CPU time is not its cost)")
    ap.add_argument("--sched-opts", type=json.loads, default={},
                    help="JSON: more options of the scheduler arms' batchsize scheduler, over "
                    "the bench's (e.g. '{\"interval\": 100000}': goodput never decides)")
    ap.add_argument("--lr-rule", choices=["adascale", "sqrt", "linear", "none"],
                    help="the scheduler arms' lr rule (default: the scheduler's, adascale)")
    ap.add_argument("--lr0", type=float, help="the scheduler arms' starting lr (default: "
                    "the best for fixed --sched-start on the first seed; with --only sched: "
                    "0.05 * sqrt(start/64))")
    ap.add_argument("--sweep-all", action="store_true", default=None,
                    help="sweep every rate on every seed and give each batch the rate with "
                    "the fewest samples over all of them (median), the fixed arms first "
                    "(default: on for mlp-2r outside --quick, else the sweep on the first "
                    "seed only)")
    ap.add_argument("--replicas", type=int,
                    help="runs per arm, replica k at the arm's lr x (1 + 1e-4 k), k = 0, -1, "
                    "1, ...; the arm's measures are its median replica's (default: 3 for "
                    "mlp-2r, else 1; one trial's time to the target is chaotic, see the "
                    "module's docstring)")
    ap.add_argument("--lock", help="flock this file around each arm (e.g. "
                    "/tmp/jizhi-bench.lock; the default holds none)")
    ap.add_argument("--keep", help="keep the arms' directories (their jizhi.db: metrics, "
                    "the scheduler's decisions in events) in this new directory")
    ap.add_argument("--json", default=os.environ.get("BENCH_SCHED_JSON"))
    ap.add_argument("--goal", type=float,
                    help="R: judge the median over seeds of the scheduler's ratio to each "
                    "seed's best fixed batch (by the --rank measure) against R, printed and "
                    "in the JSON's \"goal\" (e.g. 0.8)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the step-time curve's sizes and first command and the first "
                    "seed's arm specs (the trainer commands as a study runs them), train "
                    "nothing; exit 2 when the trainer is not found")
    args = ap.parse_args()
    if not args.sched_min <= args.sched_start <= args.sched_max:
        ap.error("--sched-start %d is outside --sched-min %d .. --sched-max %d"
                 % (args.sched_start, args.sched_min, args.sched_max))
    args.batches = args.batches or [32, 64, 128, 256, 512, 1024]
    args.sweep = args.sweep or [0.5, 1.0, 2.0]
    models = (args.models or ("mlp" if args.quick else "mlp-2r,mlp,cnn")).split(",")
    if args.quick:
        args.seeds, args.batches, args.sweep = 1, [32, 128, 512], [1.0, 2.0]
    for m in models:
        split_setting(m)  # an unknown setting is refused before anything runs
    if not shutil.which(args.trainer, path=env()["PATH"]):
        print("batchsize: the trainer %r is neither in %s nor on PATH (jizhi-train-cuda: "
              "`make cuda`)" % (args.trainer, os.path.join(BUILD, "bin")), file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(models, args)
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("batchsize: SKIPPED: Fashion-MNIST not found in %s" % DATA)
        return 0
    plots = os.path.join(BUILD, "bench")
    out = {}
    with Link(args.link), tempfile.TemporaryDirectory(prefix="jz-bench-bs-") as scratch:
        tmp = args.keep or scratch
        for model in models:
            rows, per_seed, curve = bench_model(tmp, model, args, plots)
            s = summarize(per_seed, args.rank, args.goal)
            if s:
                s["replicas"] = max(len(r["replicas"]) for r in rows)
                s["step_time"] = {str(b): {"wall_ms": w, "cpu_ms_rank0": c,
                                           "cpu_us_per_example": pe}
                                  for b, (w, c, pe) in sorted(curve.items())}
                s["noise_scale_reported"] = args.noise_reported
                s["target"] = args.last_target
                out[model] = s
                j = s["jizhi"]
                print("batchsize %s, medians over %d seed(s): jizhi %s samples, profiled %s s, "
                      "wall %s s, CPU %s s; best fixed (by %s; B %s) %s samples, profiled %s s, "
                      "wall %s s, CPU %s s; ratios to each seed's best fixed: profiled %s, wall "
                      "%s, CPU-s %s (goodput only: profiled %s; default options: %s; best fixed "
                      "batch with lr halved on plateau: %s; linear: %s)" % (
                          model, s["seeds"], fmt(j["samples_to_target"], ".0f"),
                          fmt(j["profiled_time_to_target_s"], ".2f"),
                          fmt(j["time_to_target_s"], ".1f"), fmt(j["cpu_to_target_s"], ".1f"),
                          args.rank, s["best_fixed"]["batch_sizes"],
                          fmt(s["best_fixed"]["samples_to_target"], ".0f"),
                          fmt(s["best_fixed"]["profiled_time_to_target_s"], ".2f"),
                          fmt(s["best_fixed"]["time_to_target_s"], ".1f"),
                          fmt(s["best_fixed"]["cpu_to_target_s"], ".1f"),
                          fmt(s["profiled_ratio_jizhi_to_best_fixed"], ".2f"),
                          fmt(s["time_ratio_jizhi_to_best_fixed"], ".2f"),
                          fmt(s["cpu_ratio_jizhi_to_least_fixed"], ".2f"),
                          *[fmt(s.get(k, {}).get("profile_ratio_to_best_fixed"), ".2f")
                            for k in ("jizhi_goodput_only", "jizhi_default_options",
                                      "best_fixed_plateau_lr", "linear")]))
                if "goal" in s:
                    print(goal_line(model, s))
    if args.json and out:
        # the headline: two ranks, the setting where throughput grows with the batch
        first = out.get("mlp-2r") or out.get("mlp") or next(iter(out.values()))
        sec = dict(first)
        sec["models"] = out
        write_json(args.json, "batchsize", sec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
