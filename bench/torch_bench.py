"""make bench-torch: what jizhi.torch costs a PyTorch training loop.

0. ctl.step alone, in microseconds per call (robust to load: no training
   around it): on one process standalone (reports to stderr), as a study's
   trial (polls the helper, reports to a controller every 10 steps), and
   on 2 gloo ranks, looking at the instructions at every call
   (sync_every=1: one collective each) and at the default cadence
   (sync_ms=10) with 1 ms of other work per step; each call follows a
   small all-reduce standing in for DDP's gradients, so the ranks meet
   at every step as in training.
1. Overhead: the example's loop (examples/torch/train.py's CNN on
   Fashion-MNIST, one thread) with and without jizhi.torch, in one process
   in alternating blocks of 50 steps (--rounds), at the default report
   interval (10 steps); then whole runs of train.py, alternating: --no-jizhi
   as a study's trial (the same controller, dispatcher and helper thread;
   train.py without jizhi.torch), and the same with jizhi.torch, median
   steps/s of --runs each (noisier on a shared machine); also --no-jizhi run
   on its own, outside any study (the environment's share). Goal: <= 1 %
   overhead of jizhi.torch (ratio >= 0.99).
2. Latency: a 2-rank gloo DDP trial (bench/torch_ddp_trial.py, its ranks
   started as torchrun would) under a real controller; `jizhi trial set lr`
   N times; the time from just before the CLI starts to the new lr being in
   BOTH ranks' optimizers (each rank logs the wall time it saw it), split
   into the CLI's own run (start to exit: process start of the `jizhi`
   front, request, the controller's commit and reply), to rank 0 taking it from the helper, to
   both optimizers. Goal: p99 <= one training step + 20 ms. Percentiles
   are nearest-rank over --sets (200) sets: with the 40 sets used before
   2026-12-06's fourth session the p99 was the slowest set.

3. DDP overhead (--parts ddp): 2 gloo ranks of the example's CNN (width 8,
   batch 32, one thread each, outside any study: attach(None, ...), so the
   arms differ only in their collectives), in one process pair, alternating
   blocks of 50 steps (--rounds): DDP alone, DDP with jizhi.torch as
   attached by default (rank 0's "an instruction waits" rides on DDP's
   gradient all-reduce: no collective of its own), and with
   grad_flag=False (the cadence: a broadcast of the sync box every
   max(1, sync_ms 10 / step) steps). Wall time (steps/s) and rank 0's
   process CPU a step. Goal as in 1.

4. Phases (--parts phases): a short run's parts outside the loop, timed
   in the trial itself (wall and this process's CPU, µs; best and median
   of --phase-runs study trials of --phase-steps steps each way): import
   jizhi (+ jizhi.torch), Trial() (connect, hello), attach + ctl.loader,
   the first step, steps 2..N per step, and the end (the final report,
   close: flush until the controller acknowledged every point as stored), with jizhi.torch and
   without (the same loop, plain DataLoader, one report at the end); and
   the controller's CPU over each trial. CPU time is robust to load where
   wall time is not.

Each part prints the load averages around it: numbers from a loaded
machine (load above the 2 cores) say little.

Runs on Debian's python3 (python3-torch); BUILD names the build folder.
Usage: bench/torch_bench.py [--runs 3] [--sets 200] [--look default|cadence] [--sync-ms 10]
       [--steps 300]
       [--rounds 20]
       [--phase-runs 3] [--phase-steps 100] [--parts micro,overhead,runs,latency,ddp,phases]
"""
import argparse
import glob
import json
import math
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
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
JIZHI = os.path.join(BUILD, "bin", "jizhi")
PY = sys.executable
TRAIN = os.path.join(ROOT, "examples", "torch", "train.py")


def env_base(tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JIZHI_")}
    env["PATH"] = os.path.join(BUILD, "bin") + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.path.join(ROOT, "trial_helper", "python")
    env["JIZHI_LIB"] = os.path.join(BUILD, "lib", "libjizhi.so")
    env["JIZHI_HOME"] = os.path.join(tmp, "home")
    env["JIZHI_TORCH_QUIET"] = "1"
    return env


class Daemons:
    def __init__(self, tmp, env):
        self.tmp, self.env = tmp, env
        self.db = os.path.join(tmp, "jizhi.db")
        ep = "ipc://%s/ctl.sock" % tmp
        self.procs = [subprocess.Popen([JIZHI, "controller", "--db", self.db, "--bind", ep,
                                        "--log", os.path.join(tmp, "ctl.log")], env=env,
                                       cwd=tmp, stdout=subprocess.DEVNULL)]
        while not os.path.exists(self.db + ".endpoint"):
            time.sleep(0.05)
        self.procs.append(subprocess.Popen([JIZHI, "dispatcher", "--controller", ep, "--slots",
                                            "1", "--name", "b1", "--log-dir",
                                            os.path.join(tmp, "logs")], env=env, cwd=tmp,
                                           stdout=subprocess.DEVNULL))

    def jizhi(self, *args, check=True):
        p = subprocess.run([JIZHI, *args], env=self.env, cwd=self.tmp, capture_output=True,
                           text=True, timeout=120)
        if check and p.returncode != 0:
            raise SystemExit("jizhi %s: %s" % (" ".join(args), p.stderr))
        return p

    def sql(self, q, *a):
        con = sqlite3.connect(self.db, timeout=10)
        try:
            return con.execute(q, a).fetchall()
        finally:
            con.close()

    def study(self, name, command, env=None):
        spec = {"name": name, "objective": {"metric": "val_acc", "mode": "max"},
                "scheduler": {"type": "random", "seed": 1}, "budget": {"trials": 1, "parallel": 1},
                "space": {"lr": {"type": "float", "low": 0.01, "high": 0.011}},
                "trial": {"command": command, "timeout_s": 900, "retries": 0, "env": env or {}}}
        path = os.path.join(self.tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        self.jizhi("study", "submit", path)

    def wait(self, cond, timeout, what):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if cond():
                    return
            except (sqlite3.OperationalError, IndexError):
                pass
            time.sleep(0.05)
        raise SystemExit("timed out waiting for " + what)

    def close(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def steps_per_s(out, cpu=False):
    """train.py's last line: steps/s, or (cpu=True) CPU-seconds a step."""
    for line in out.splitlines():
        if line.startswith("steps "):
            if cpu:
                return float(line.split("(CPU ")[1].split()[0]) / int(line.split()[1])
            return float(line.split(":")[1].split()[0])
    raise SystemExit("no steps/s line in:\n" + out)


def overhead_child(rounds, block):
    """In one process, alternating blocks of `block` steps: the example's
    loop with a plain DataLoader, and the same with ctl.loader + ctl.step
    (standalone: its reports go to stderr). Load on a shared machine hits
    both alike."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(TRAIN))
    from train import Net, fashion_mnist
    import jizhi
    import jizhi.torch
    torch.set_num_threads(1)
    data = fashion_mnist("train", 12000)
    t = jizhi.Trial()

    def setup(seed):
        torch.manual_seed(seed)
        m = Net()
        o = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
        return m, o

    def forever(it_fn):
        while True:
            yield from it_fn()

    m0, o0 = setup(1)
    plain = forever(lambda: torch.utils.data.DataLoader(data, batch_size=64, shuffle=True))
    m1, o1 = setup(1)
    ctl = jizhi.torch.attach(t, o1, model=m1)
    ours = iter(ctl.loader(data, batch_size=64, shuffle=True, epochs=10 ** 9))
    spent = [0.0, 0.0]
    for r in range(rounds):
        for mode in ((0, 1) if r % 2 == 0 else (1, 0)):
            m, o, it = (m0, o0, plain) if mode == 0 else (m1, o1, ours)
            t0 = time.perf_counter()
            for _ in range(block):
                x, y = next(it)
                o.zero_grad()
                loss = F.cross_entropy(m(x), y)
                loss.backward()
                o.step()
                if mode:
                    ctl.step(loss=loss)
            spent[mode] += time.perf_counter() - t0
    n = rounds * block
    print(json.dumps({"without": n / spent[0], "with": n / spent[1]}))


def ddp_child(rounds, block):
    """The DDP overhead part's two ranks (started here as torchrun would):
    three DDP copies of the example's CNN, trained in turn for `block`
    steps each round (the order rotating, so load hits all alike); rank 0
    prints steps/s per arm as JSON."""
    import socket
    if "RANK" not in os.environ:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        procs = [subprocess.Popen([PY, __file__, "--ddp-child", str(rounds)],
                                  env=dict(os.environ, RANK=str(r), WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
                 for r in range(2)]
        sys.exit(max(abs(p.wait()) for p in procs))  # a rank killed by a signal too
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(TRAIN))
    sys.path.insert(0, os.path.join(ROOT, "trial_helper", "python"))
    from train import Net, fashion_mnist
    import jizhi.torch
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = fashion_mnist("train", 4096)
    arms = ("ddp", "default", "cadence")
    runs = {}
    for arm in arms:
        torch.manual_seed(1)
        m = torch.nn.parallel.DistributedDataParallel(Net(8))
        o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        # the default (the flag on DDP's all-reduce), and the cadence instead
        opts = {"grad_flag": False} if arm == "cadence" else {}
        ctl = None if arm == "ddp" else jizhi.torch.attach(None, o, model=m, **opts)
        if ctl is None:
            sampler = torch.utils.data.DistributedSampler(data, seed=1)
            loader = torch.utils.data.DataLoader(data, batch_size=32, sampler=sampler)

            def forever(loader=loader, sampler=sampler):
                e = 0
                while True:
                    sampler.set_epoch(e)
                    yield from loader
                    e += 1
            it = forever()
        else:
            it = iter(ctl.loader(data, batch_size=32, shuffle=True, epochs=10 ** 9))
        runs[arm] = (m, o, ctl, it)
    spent = dict.fromkeys(arms, 0.0)
    cpu = dict.fromkeys(arms, 0.0)
    syncs = {}
    for r in range(rounds + 1):  # round 0 warms up, not counted
        for k in range(len(arms)):
            arm = arms[(k + r) % len(arms)]
            m, o, ctl, it = runs[arm]
            before = ctl.syncs if ctl else 0
            dist.barrier()
            t0 = time.perf_counter()
            c0 = time.process_time()
            for _ in range(block):
                x, y = next(it)
                o.zero_grad()
                F.cross_entropy(m(x), y).backward()
                o.step()
                if ctl:
                    ctl.step()
            if r:
                spent[arm] += time.perf_counter() - t0
                cpu[arm] += time.process_time() - c0
                if ctl:
                    syncs[arm] = syncs.get(arm, 0) + ctl.syncs - before
    if rank == 0:
        n = rounds * block
        print(json.dumps({"steps_per_s": {a: n / spent[a] for a in arms},
                          "cpu_us_per_step": {a: cpu[a] / n * 1e6 for a in arms},
                          "collectives": syncs, "steps": n}), flush=True)
    dist.destroy_process_group()


def ddp(d, args):
    before = load()
    p = subprocess.run([PY, __file__, "--ddp-child", str(args.rounds)], env=d.env,
                       stdout=subprocess.PIPE, text=True, timeout=900)
    if p.returncode:
        raise SystemExit("ddp child failed")
    r = json.loads(p.stdout)
    v, c, u = r["steps_per_s"], r["collectives"], r["cpu_us_per_step"]
    r["ratio_default"] = v["default"] / v["ddp"]
    r["ratio_cadence"] = v["cadence"] / v["ddp"]
    print("torch DDP overhead (2 gloo ranks, the example's CNN width 8, batch 32, %d alternating "
          "blocks of 50 steps; %s .. %s): DDP alone %.1f steps/s (rank 0's CPU %.0f us a step), "
          "with jizhi.torch at the default %.1f (%.0f us; %d collectives of its own in %d steps): "
          "ratio %.3f; with the cadence %.1f (%.0f us; %d): ratio %.3f (goal >= 0.99)"
          % (args.rounds, before, load(), v["ddp"], u["ddp"], v["default"], u["default"],
             c.get("default", 0), r["steps"], r["ratio_default"], v["cadence"], u["cadence"],
             c.get("cadence", 0), r["ratio_cadence"]))
    return r


def load():
    return "load %.1f %.1f %.1f" % os.getloadavg()


MICRO_BLOCKS, MICRO_CALLS = 20, 1000  # per block: the best block is the cost, the median
# is what this machine's load left of it


def _blocks(fn, blocks, calls):
    """fn(calls) -> seconds spent in ctl.step; microseconds per call: best and median block."""
    v = sorted(fn(calls) / calls * 1e6 for _ in range(blocks))
    return {"best_us": v[0], "median_us": v[len(v) // 2]}


def micro_child(mode):
    """ctl.step(loss=...) alone, report_every=10, in blocks of calls; prints
    JSON: microseconds per call (rank 0's, for ddp)."""
    sys.path.insert(0, os.path.join(ROOT, "trial_helper", "python"))
    import torch
    import jizhi
    import jizhi.torch
    torch.set_num_threads(1)
    if mode == "ddp" and "RANK" not in os.environ:
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        procs = [subprocess.Popen([PY, __file__, "--micro-child", "ddp"],
                                  env=dict(os.environ, RANK=str(r), WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
                 for r in range(2)]
        sys.exit(max(abs(p.wait()) for p in procs))  # a rank killed by a signal too
    out = {}
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss = torch.tensor(1.0)
    if mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        grad = torch.zeros(1000)
        for name, opts, work in (("sync_every=1", {"sync_every": 1}, 0.0),
                                 ("sync_ms=10, 1 ms steps", {}, 0.001)):
            ctl = jizhi.torch.attach(None, opt, model=model, **opts)

            def run(n):
                spent = 0.0
                for _ in range(n):
                    # the step's other work, not counted: 1 ms, then a gradient
                    # all-reduce as DDP's (the ranks meet at every step)
                    end = time.perf_counter() + work
                    while time.perf_counter() < end:
                        pass
                    dist.all_reduce(grad)
                    t0 = time.perf_counter()
                    ctl.step(loss=loss)
                    spent += time.perf_counter() - t0
                return spent

            run(100)
            before = getattr(ctl, "syncs", None)
            calls = MICRO_CALLS // 4 if work else MICRO_CALLS
            out[name] = _blocks(run, MICRO_BLOCKS // 2, calls)
            out[name]["calls"] = calls * (MICRO_BLOCKS // 2)
            out[name]["allreduces"] = -1 if before is None else ctl.syncs - before
            dist.barrier()
        if dist.get_rank() == 0:
            print(json.dumps(out), flush=True)
        dist.destroy_process_group()
        return
    t = jizhi.Trial()
    ctl = jizhi.torch.attach(t, opt, model=model)

    def run(n):
        t0 = time.perf_counter()
        for _ in range(n):
            ctl.step(loss=loss)
        return time.perf_counter() - t0

    run(1000)  # warm up: names checked once, first reports
    print(json.dumps(_blocks(run, MICRO_BLOCKS, MICRO_CALLS)), flush=True)
    t.close()


def micro(d, args):
    before = load()
    env = dict(d.env, JIZHI_TORCH_QUIET="1")
    p = subprocess.run([PY, __file__, "--micro-child", "standalone"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=600)
    alone = json.loads(p.stdout)
    d.study("micro", [PY, __file__, "--micro-child", "lead"])
    d.wait(lambda: d.sql("SELECT state FROM studies WHERE name='micro'")[0][0] == "finished",
           600, "study micro")
    (tid,) = d.sql("SELECT t.id FROM trials t JOIN studies s ON s.id=t.study_id "
                   "WHERE s.name='micro'")[0]
    with open(glob.glob(os.path.join(d.tmp, "logs", "micro", "trial-%d.*.out" % tid))[0]) as f:
        lead = json.loads(f.read())
    p = subprocess.run([PY, __file__, "--micro-child", "ddp"], env=env, stdout=subprocess.PIPE,
                       text=True, timeout=600)
    ddp = json.loads(p.stdout)
    a, b = ddp["sync_every=1"], ddp["sync_ms=10, 1 ms steps"]
    print("ctl.step(loss=...) alone, report every 10, us/call, best/median of blocks (%s .. %s): "
          "standalone %.2f/%.2f; a study's trial (polls the helper, reports to the controller) "
          "%.2f/%.2f; 2 gloo ranks, sync_every=1 %.1f/%.1f (%d collectives in %d calls); "
          "default sync_ms=10 with 1 ms steps %.1f/%.1f (%d collectives in %d calls)"
          % (before, load(), alone["best_us"], alone["median_us"], lead["best_us"],
             lead["median_us"], a["best_us"], a["median_us"], a["allreduces"], a["calls"],
             b["best_us"], b["median_us"], b["allreduces"], b["calls"]))
    return {"standalone": alone, "trial": lead, "ddp": ddp}


def overhead(d, args):
    before = load()
    p = subprocess.run([PY, __file__, "--overhead-child", str(args.rounds)], env=d.env,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       timeout=900)
    if p.returncode:
        raise SystemExit("overhead child failed")
    r = json.loads(p.stdout)
    print("torch overhead (in one process, %d alternating blocks of 50 steps each; %s .. %s): "
          "without jizhi.torch %.1f steps/s, with (report every 10) %.1f steps/s: ratio %.3f "
          "(goal >= 0.99)" % (args.rounds, before, load(), r["without"], r["with"],
                              r["with"] / r["without"]))
    r["ratio"] = r["with"] / r["without"]
    return r


def overhead_runs(d, args):
    before = load()
    flags = ["--epochs", "1", "--train-subset", str(args.steps * 64), "--eval-every",
             "1000000000", "--val-size", "500", "--threads", "1"]
    alone, without, with_ = [], [], []
    cpu = {"without": [], "with": []}  # CPU-seconds a step of the trial's process

    def trial(name, extra):
        d.study(name, [PY, TRAIN, *flags, *extra])
        d.wait(lambda: d.sql("SELECT state FROM studies WHERE name=?", name)[0][0] == "finished",
               600, "study " + name)
        (tid,) = d.sql("SELECT t.id FROM trials t JOIN studies s ON s.id=t.study_id "
                       "WHERE s.name=?", name)[0]
        logs = glob.glob(os.path.join(d.tmp, "logs", name, "trial-%d.*.out" % tid))
        with open(logs[0]) as f:
            out = f.read()
        cpu["without" if "--no-jizhi" in extra else "with"].append(steps_per_s(out, cpu=True))
        return steps_per_s(out)

    for i in range(args.runs):
        p = subprocess.run([PY, TRAIN, "--no-jizhi", *flags], env=d.env, capture_output=True,
                           text=True, timeout=600)
        if p.returncode:
            raise SystemExit(p.stderr)
        alone.append(steps_per_s(p.stdout))
        # alternate which goes first, so a change of load hits both alike
        for kind in (("without", "with") if i % 2 == 0 else ("with", "without")):
            if kind == "without":
                without.append(trial("plain%d" % i, ["--no-jizhi"]))
            else:
                with_.append(trial("ovh%d" % i, []))
    a, b, c = statistics.median(without), statistics.median(with_), statistics.median(alone)
    ca, cb = statistics.median(cpu["without"]), statistics.median(cpu["with"])
    print("torch overhead: %d steps/run, %d runs each (%s .. %s): a study's trial without "
          "jizhi.torch %.1f steps/s %s, with it (report every 10) %.1f steps/s %s: ratio %.3f "
          "(goal >= 0.99); without, outside any study: %.1f steps/s %s (with/that %.3f). "
          "The trial's CPU a step (every thread, the load moves it less): without %.0f us %s, "
          "with %.0f us %s: ratio %.3f"
          % (args.steps, args.runs, before, load(), a, _runs(without), b, _runs(with_), b / a,
             c, _runs(alone), b / c, ca * 1e6, _runs([x * 1e6 for x in cpu["without"]]),
             cb * 1e6, _runs([x * 1e6 for x in cpu["with"]]), ca / cb))
    return {"without": without, "with": with_, "alone": alone, "ratio": b / a,
            "ratio_alone": b / c, "cpu_s_per_step": cpu, "ratio_cpu": ca / cb}


def _runs(v):
    return "(" + ", ".join("%.1f" % x for x in v) + ")"


def latency(d, args):
    before = load()
    log = os.path.join(d.tmp, "rank")
    d.study("lat", [PY, os.path.join(ROOT, "bench", "torch_ddp_trial.py")],
            {"LOG": log, "SYNC_MS": repr(args.sync_ms), "LOOK": args.look})
    q = ("SELECT COUNT(*), t.id FROM metrics m JOIN trials t ON t.id=m.trial_id JOIN studies s "
         "ON s.id=t.study_id WHERE s.name='lat' AND m.name='step_time_s'")
    d.wait(lambda: d.sql(q)[0][0] >= 3, 120, "the DDP trial to report")
    tid = d.sql(q)[0][1]

    def seen(suffix, lr):
        try:
            with open(log + suffix) as f:
                for line in f:
                    v, t = line.split()[:2]
                    if float(v) == lr:
                        return float(t)
        except FileNotFoundError:
            pass
        return None

    rows = []
    for i in range(args.sets):
        lr = round(0.02 + 0.0001 * (i + 1), 6)
        t0 = time.time()
        # outside the narrow space the study samples from: --force
        d.jizhi("trial", "set", str(tid), "lr=%r" % lr, "--no-wait", "--force")
        t1 = time.time()
        d.wait(lambda: seen(".0", lr) is not None and seen(".1", lr) is not None, 30, "lr %r" % lr)
        rows.append((t1 - t0, seen(".poll", lr) - t0, max(seen(".0", lr), seen(".1", lr)) - t0))
        time.sleep(0.05)
    step = statistics.median(v for (v,) in d.sql(
        "SELECT value FROM metrics WHERE trial_id=? AND name='step_time_s'", tid))
    d.jizhi("trial", "stop", str(tid))

    def pct(f, q):
        # nearest rank: the smallest value with at least q of the sets at or
        # below it (with 40 sets the p99 was simply the slowest set)
        v = sorted(f(r) for r in rows)
        return v[max(0, math.ceil(q * len(v)) - 1)]

    def ms(f):
        return "%.1f/%.1f" % (pct(f, 0.5) * 1e3, pct(f, 0.99) * 1e3)

    p50, p99 = pct(lambda r: r[2], 0.5), pct(lambda r: r[2], 0.99)
    goal = step + 0.020
    print("torch set latency (2 gloo ranks, looks: %s, %d sets, `jizhi trial set --no-wait` "
          "start to the lr "
          "in both optimizers; %s .. %s): p50 %.1f ms, p99 %.1f ms; step %.1f ms, goal p99 <= "
          "%.1f ms: ratio p99/goal %.3f. Each set's parts, p50/p99 ms: the CLI's run %s, its "
          "exit to rank 0 taking it from the helper %s, that to both optimizers %s; after the "
          "CLI's exit in all %s"
          % (args.look if args.look == "default" else "cadence, sync_ms %g" % args.sync_ms,
             len(rows), before, load(), p50 * 1e3, p99 * 1e3, step * 1e3, goal * 1e3, p99 / goal,
             ms(lambda r: r[0]), ms(lambda r: r[1] - r[0]), ms(lambda r: r[2] - r[1]),
             ms(lambda r: r[2] - r[0])))
    return {"p50_s": p50, "p99_s": p99, "step_s": step, "ratio": p99 / goal,
            "sets": [{"cli_s": a, "polled_s": b, "both_s": c} for a, b, c in rows]}


PHASES = ("import", "trial", "attach", "first_step", "per_step", "end")


def phases_child(mode, steps):
    """One short run, timed by phase in this process: prints JSON
    {phase: [wall_us, cpu_us]} (per_step: per step of steps 2..N)."""
    import torch  # noqa: F811 (torch's own import is not a phase of ours)
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(TRAIN))
    torch.set_num_threads(1)
    out = {}
    clock = [time.perf_counter(), time.process_time()]

    def lap(name, div=1):
        now = [time.perf_counter(), time.process_time()]
        out[name] = [(now[0] - clock[0]) / div * 1e6, (now[1] - clock[1]) / div * 1e6]
        clock[:] = [time.perf_counter(), time.process_time()]

    import jizhi
    if mode == "with":
        import jizhi.torch
    lap("import")
    t = jizhi.Trial()
    lap("trial")
    from train import Net, fashion_mnist  # noqa: E402
    data = fashion_mnist("train", steps * 64)
    torch.manual_seed(1)
    m = Net()
    o = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    clock[:] = [time.perf_counter(), time.process_time()]
    if mode == "with":
        ctl = jizhi.torch.attach(t, o, model=m)
        it = iter(ctl.loader(data, batch_size=64, shuffle=True, epochs=1, seed=1))
    else:
        ctl = None
        it = iter(torch.utils.data.DataLoader(data, batch_size=64, shuffle=True,
                                              generator=torch.Generator().manual_seed(1)))
    lap("attach")
    n = 0
    for x, y in it:
        o.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        if ctl is not None:
            ctl.step(loss=loss)
        n += 1
        if n == 1:
            lap("first_step")
    lap("per_step", max(1, n - 1))
    if ctl is not None:
        ctl.report_eval(val_acc=0.5)
    else:
        t.report(n, val_acc=0.5)
    t.close()
    lap("end")
    print(json.dumps(out), flush=True)


def _proc_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def phases(d, args):
    before = load()
    got = {"with": [], "without": []}
    ctl_cpu = {"with": [], "without": []}
    for i in range(args.phase_runs):
        for mode in (("without", "with") if i % 2 == 0 else ("with", "without")):
            name = "ph%s%d" % (mode, i)
            c0 = _proc_cpu(d.procs[0].pid)
            d.study(name, [PY, __file__, "--phases-child", mode, "--phase-steps",
                           str(args.phase_steps)])
            d.wait(lambda: d.sql("SELECT state FROM studies WHERE name=?", name)[0][0] ==
                   "finished", 600, "study " + name)
            ctl_cpu[mode].append((_proc_cpu(d.procs[0].pid) - c0) * 1e3)
            (tid,) = d.sql("SELECT t.id FROM trials t JOIN studies s ON s.id=t.study_id "
                           "WHERE s.name=?", name)[0]
            with open(glob.glob(os.path.join(d.tmp, "logs", name, "trial-%d.*.out" % tid))[0]) as f:
                got[mode].append(json.loads(f.read()))
    res = {}
    for mode, runs in got.items():
        res[mode] = {p: {k: [min(r[p][j] for r in runs), statistics.median(r[p][j] for r in runs)]
                         for j, k in enumerate(("wall_us", "cpu_us"))} for p in PHASES}
        res[mode]["controller_cpu_ms"] = statistics.median(ctl_cpu[mode])
    print("torch phases, %d-step study trials, %d each way (%s .. %s), wall/cpu us, best "
          "[median]:" % (args.phase_steps, args.phase_runs, before, load()))
    for p in PHASES:
        print("  %-10s without %9.0f/%9.0f [%9.0f/%9.0f]   with %9.0f/%9.0f [%9.0f/%9.0f]"
              % (p, res["without"][p]["wall_us"][0], res["without"][p]["cpu_us"][0],
                 res["without"][p]["wall_us"][1], res["without"][p]["cpu_us"][1],
                 res["with"][p]["wall_us"][0], res["with"][p]["cpu_us"][0],
                 res["with"][p]["wall_us"][1], res["with"][p]["cpu_us"][1]))
    print("  the controller's CPU over a trial, median: without %.0f ms, with %.0f ms"
          % (res["without"]["controller_cpu_ms"], res["with"]["controller_cpu_ms"]))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sets", type=int, default=200)
    # the DDP trial's looks: attach's default (the flag on DDP's gradient
    # all-reduce) or the cadence (grad_flag=False) every --sync-ms (0: every step)
    ap.add_argument("--look", choices=("default", "cadence"), default="default")
    ap.add_argument("--sync-ms", type=float, default=10.0)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--phase-runs", type=int, default=3)
    ap.add_argument("--phase-steps", type=int, default=100)
    ap.add_argument("--parts", default="micro,overhead,runs,latency,ddp,phases")
    ap.add_argument("--phases-child", default="")
    ap.add_argument("--overhead-child", type=int, default=0)
    ap.add_argument("--micro-child", default="")
    ap.add_argument("--ddp-child", type=int, default=0)
    args = ap.parse_args()
    if args.overhead_child:
        overhead_child(args.overhead_child, 50)
        return
    if args.ddp_child:
        ddp_child(args.ddp_child, 50)
        return
    if args.micro_child:
        micro_child(args.micro_child)
        return
    if args.phases_child:
        phases_child(args.phases_child, args.phase_steps)
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench-torch: skipped: %s has no torch (Debian: python3-torch)" % PY)
        return
    tmp = tempfile.mkdtemp(prefix="jizhi-bench-torch-")
    env = env_base(tmp)
    d = Daemons(tmp, env)
    try:
        parts = {"micro": micro, "overhead": overhead, "runs": overhead_runs,
                 "latency": latency, "ddp": ddp, "phases": phases}
        out = {}
        for name in args.parts.split(","):
            if name not in parts:
                raise SystemExit("bench-torch: --parts: unknown part %r (micro, overhead, runs, "
                                 "latency, ddp, phases)" % name)
            out[name] = parts[name](d, args)
        print(json.dumps(out))
    finally:
        d.close()
        shutil.rmtree(tmp, ignore_errors=True) if not os.environ.get("KEEP") else None


if __name__ == "__main__":
    main()
