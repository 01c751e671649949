"""make bench-torch: what jizhi.torch costs a PyTorch training loop.

1. Overhead: the example's loop (examples/torch/train.py's CNN on
   Fashion-MNIST, one thread) with and without jizhi.torch, in one process
   in alternating blocks of 50 steps (--rounds), at the default report
   interval (10 steps); then whole runs of train.py, --no-jizhi against a
   trial of a real study (reports go to a controller), median steps/s of
   --runs each (noisier on a shared machine). Goal: <= 1 % overhead
   (ratio >= 0.99).
2. Latency: a 2-rank gloo DDP trial (bench/torch_ddp_trial.py, its ranks
   started as torchrun would) under a real controller; `jizhi trial set lr`
   N times; the time from just before the CLI starts to the new lr being in
   BOTH ranks' optimizers (each rank logs the wall time it saw it). Goal:
   p99 <= one training step + 20 ms.

Runs on Debian's python3 (python3-torch); BUILD names the build folder.
Usage: bench/torch_bench.py [--runs 3] [--sets 40] [--steps 300]
"""
import argparse
import glob
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


def steps_per_s(out):
    for line in out.splitlines():
        if line.startswith("steps "):
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


def overhead(d, args):
    p = subprocess.run([PY, __file__, "--overhead-child", str(args.rounds)], env=d.env,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       timeout=900)
    if p.returncode:
        raise SystemExit("overhead child failed")
    r = json.loads(p.stdout)
    print("torch overhead (in one process, %d alternating blocks of 50 steps each): without "
          "jizhi.torch %.1f steps/s, with (report every 10) %.1f steps/s: ratio %.3f (goal >= 0.99)"
          % (args.rounds, r["without"], r["with"], r["with"] / r["without"]))
    r["ratio"] = r["with"] / r["without"]
    return r


def overhead_runs(d, args):
    flags = ["--epochs", "1", "--train-subset", str(args.steps * 64), "--eval-every",
             "1000000000", "--val-size", "500", "--threads", "1"]
    without, with_ = [], []
    for i in range(args.runs):
        p = subprocess.run([PY, TRAIN, "--no-jizhi", *flags], env=d.env, capture_output=True,
                           text=True, timeout=600)
        if p.returncode:
            raise SystemExit(p.stderr)
        without.append(steps_per_s(p.stdout))
        name = "ovh%d" % i
        d.study(name, [PY, TRAIN, *flags])
        d.wait(lambda: d.sql("SELECT state FROM studies WHERE name=?", name)[0][0] == "finished",
               600, "study " + name)
        (tid,) = d.sql("SELECT t.id FROM trials t JOIN studies s ON s.id=t.study_id "
                       "WHERE s.name=?", name)[0]
        logs = glob.glob(os.path.join(d.tmp, "logs", name, "trial-%d.*.out" % tid))
        with open(logs[0]) as f:
            with_.append(steps_per_s(f.read()))
    a, b = statistics.median(without), statistics.median(with_)
    print("torch overhead: %d steps/run, %d runs each: without jizhi.torch %.1f steps/s, "
          "with (a study's trial, report every 10) %.1f steps/s: ratio %.3f (goal >= 0.99)"
          % (args.steps, args.runs, a, b, b / a))
    return {"without": without, "with": with_, "ratio": b / a}


def latency(d, args):
    log = os.path.join(d.tmp, "rank")
    d.study("lat", [PY, os.path.join(ROOT, "bench", "torch_ddp_trial.py")], {"LOG": log})
    q = ("SELECT COUNT(*), t.id FROM metrics m JOIN trials t ON t.id=m.trial_id JOIN studies s "
         "ON s.id=t.study_id WHERE s.name='lat' AND m.name='step_time_s'")
    d.wait(lambda: d.sql(q)[0][0] >= 3, 120, "the DDP trial to report")
    tid = d.sql(q)[0][1]

    def seen(r, lr):
        try:
            with open("%s.%d" % (log, r)) as f:
                for line in f:
                    v, t, _ = line.split()
                    if float(v) == lr:
                        return float(t)
        except FileNotFoundError:
            pass
        return None

    lats = []
    for i in range(args.sets):
        lr = round(0.02 + 0.0001 * (i + 1), 6)
        t0 = time.time()
        # outside the narrow space the study samples from: --force
        d.jizhi("trial", "set", str(tid), "lr=%r" % lr, "--no-wait", "--force")
        d.wait(lambda: seen(0, lr) is not None and seen(1, lr) is not None, 30, "lr %r" % lr)
        lats.append(max(seen(0, lr), seen(1, lr)) - t0)
        time.sleep(0.05)
    step = statistics.median(v for (v,) in d.sql(
        "SELECT value FROM metrics WHERE trial_id=? AND name='step_time_s'", tid))
    d.jizhi("trial", "stop", str(tid))
    lats.sort()
    p50 = lats[len(lats) // 2]
    p99 = lats[min(len(lats) - 1, int(0.99 * len(lats)))]
    goal = step + 0.020
    print("torch set latency (2 gloo ranks, %d sets, `jizhi trial set --no-wait` start to the lr "
          "in both optimizers): p50 %.1f ms, p99 %.1f ms; step %.1f ms, goal p99 <= %.1f ms: "
          "ratio p99/goal %.3f" % (len(lats), p50 * 1e3, p99 * 1e3, step * 1e3, goal * 1e3,
                                   p99 / goal))
    return {"p50_s": p50, "p99_s": p99, "step_s": step, "ratio": p99 / goal}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sets", type=int, default=40)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--overhead-child", type=int, default=0)
    args = ap.parse_args()
    if args.overhead_child:
        overhead_child(args.overhead_child, 50)
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
        out = {"overhead": overhead(d, args), "overhead_runs": overhead_runs(d, args),
               "latency": latency(d, args)}
        print(json.dumps(out))
    finally:
        d.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
