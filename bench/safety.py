"""bench/safety.py - `make bench-safety`: guarded changes and live forks on
jizhi-train (Fashion-MNIST, a 20 000-image subset, 256-256 MLP, batch 128,
one thread per trial), through a controller and a dispatcher of this
build.

1. A bad change: three trials at lr 0.05 for STEPS steps; at mid-training
   one gets lr x20 with `trial set --guard`, one the same without, and the
   third is left alone (the control). Printed: each one's final val_acc,
   and for the guarded one the steps lost (made after its checkpoint and
   thrown away by the revert).
2. Fork to choose lr: a trial at lr 0.003 runs to mid-training, then
   `trial fork` into lr 0.03 and 0.1 (the parent goes on at 0.003 as the
   third candidate; the best sibling after --steps continues), against
   the same three candidates started from scratch at once. Both go to
   STEPS steps in all. Printed: the time from the decision (the fork
   command, or the restart's submit) until a trial reports val_acc >= B,
   B the lower of the two arms' best val_acc, and the ratio fork/restart
   (the issue's goal: <= 0.5).

   Fair to both arms: each starts its clock once its dispatcher has
   registered (a fresh controller and dispatcher per arm), the arms of a
   pair run one after the other (alternating which goes first), and the
   same three candidates run on the same three slots.

Numbers are wall-clock seconds on this machine (the trials share its
cores); the 1-minute load average is sampled every second during each
arm and printed with each figure: a pair whose load went past the number
of cores says so, and the summary claims nothing about the goal from
such runs. --quick: fewer steps. --no-data-cache: the trials decompress
the data at every start (jizhi-train --data-cache off), for an A/B. --runs N: N fork/restart pairs, each
printed, then their medians. --only fork|bad: one scenario.
`make bench-safety BENCH_SAFETY_ARGS="--only fork --runs 5"` reruns the
fork comparison alone (one pair took 1.5 min at load 16-20 on the 2-core
build machine; less on a quiet one).
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import statistics
import tempfile
import threading
import time

from benchlib import build_dir, jizhi_env

BUILD = build_dir()
JIZHI = os.path.join(BUILD, "bin", "jizhi")


class LoadSampler:
    """The 1-minute load average, sampled every second while it runs."""

    def __init__(self):
        self.samples = [os.getloadavg()[0]]
        self.done = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        while not self.done.wait(1.0):
            self.samples.append(os.getloadavg()[0])

    def stop(self):
        self.done.set()
        self.th.join()
        self.samples.append(os.getloadavg()[0])
        return min(self.samples), max(self.samples)


def env():
    return jizhi_env(BUILD)


class Daemons:
    def __init__(self, d, slots):
        self.d = d
        self.db = os.path.join(d, "jizhi.db")
        self.ep = "ipc://%s/ctl.sock" % d
        self.env = env()
        self.env["JIZHI_HOME"] = os.path.join(d, "home")
        self.ctl = subprocess.Popen([JIZHI, "controller", "--db", self.db, "--bind", self.ep,
                                     "--log", os.path.join(d, "controller.log")],
                                    cwd=d, env=self.env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        self.wait(lambda: os.path.exists(self.db + ".endpoint"), 30)
        self.disp = subprocess.Popen([JIZHI, "dispatcher", "--controller", self.ep, "--slots",
                                      str(slots), "--name", "m1", "--log-dir",
                                      os.path.join(d, "logs")],
                                     cwd=d, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(d, "dispatcher.log"), "w"))

    def wait_dispatcher(self):
        """Until the dispatcher has registered its slots (a trial submitted
        before would count its start-up too)."""
        self.wait(lambda: self.sql("SELECT COALESCE(SUM(slots), 0) FROM dispatchers")[0][0]
                  > 0, 60)

    def run(self, *args, timeout=900):
        return subprocess.run([JIZHI, *args, "--db", self.db], cwd=self.d, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def sql(self, q, *p):
        con = sqlite3.connect(self.db, timeout=10)
        try:
            return con.execute(q, p).fetchall()
        finally:
            con.close()

    def wait(self, cond, timeout, poll=0.05):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if cond():
                    return True
            except (sqlite3.OperationalError, IndexError, TypeError):
                pass
            time.sleep(poll)
        raise RuntimeError("timed out")

    def step(self, tid, name="val_acc"):
        return self.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND name=?", tid,
                        name)[0][0] or 0

    def last(self, tid, name="val_acc"):
        r = self.sql("SELECT value FROM metrics WHERE trial_id=? AND name=? ORDER BY rowid "
                     "DESC LIMIT 1", tid, name)
        return r[0][0] if r else None

    def stop(self):
        for p in (self.disp, self.ctl):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (self.disp, self.ctl):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


TRAIN_EXTRA = []  # --no-data-cache: ["--data-cache", "off"] (an A/B of the copies)


def train_cmd(steps):
    return ["jizhi-train", "--dataset", "fashion-mnist", "--train-subset", "20000",
            "--val-size", "2000", "--hidden", "256,256", "--batch-size", "128",
            "--momentum", "0.9", "--epochs", "1000", "--max-steps", str(steps),
            "--eval-every", "50", "--log-every", "25", "--threads", "1", "--quiet",
            "--seed", "1"] + TRAIN_EXTRA


def spec(name, lrs, trials, steps, seed=1):
    return {"name": name, "objective": {"metric": "val_acc", "mode": "max"},
            "scheduler": {"type": "grid" if len(lrs) > 1 else "random", "seed": seed},
            "budget": {"trials": trials, "parallel": trials},
            "space": {"lr": {"type": "choice", "values": lrs}},
            "trial": {"command": train_cmd(steps), "timeout_s": 1800, "retries": 0}}


def submit(dm, sp):
    path = os.path.join(dm.d, "spec.json")
    with open(path, "w") as f:
        json.dump(sp, f)
    r = dm.run("study", "submit", path)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)


def bad_change(tmp, steps):
    d = os.path.join(tmp, "bad")
    os.makedirs(d)
    dm = Daemons(d, 3)
    try:
        submit(dm, spec("bad", [0.05], 3, steps))
        dm.wait(lambda: dm.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0] == 3,
                120)
        guarded, unguarded, control = [r[0] for r in dm.sql("SELECT id FROM trials ORDER BY id")]
        mid = steps // 2
        dm.wait(lambda: dm.step(unguarded, "train_loss") >= mid, 600)
        r1 = dm.run("trial", "set", str(unguarded), "lr=1.0", "--force")
        dm.wait(lambda: dm.step(guarded, "train_loss") >= mid, 600)
        r2 = dm.run("trial", "set", str(guarded), "lr=1.0", "--force", "--guard")
        dm.wait(lambda: dm.sql("SELECT COUNT(*) FROM trials WHERE state IN ('running', "
                               "'starting', 'pending')")[0][0] == 0, 1800)
        rows = dict((t, (s, v)) for t, s, v in dm.sql("SELECT id, state, value FROM trials"))
        iv = dm.sql("SELECT state, data FROM interventions WHERE trial_id=?", guarded)
        data = json.loads(iv[0][1]) if iv else {}
        ev = data.get("evidence", {})
        lost = None
        if ev and data.get("ckpt"):
            # steps made after the checkpoint and undone by the revert
            lost = max(p[0] for p in ev.get("window", [[data["ckpt"]["step"]]])) - \
                data["ckpt"]["step"]
        return {"steps": steps, "change_at": mid,
                "control_val_acc": dm.last(control), "unguarded_val_acc": dm.last(unguarded),
                "guarded_val_acc": dm.last(guarded), "guard": iv[0][0] if iv else None,
                "guard_reason": data.get("reason"), "steps_lost": lost,
                "unguarded_set": r1.stdout.strip(), "guarded_set": r2.stdout.strip(),
                "states": {str(k): v[0] for k, v in rows.items()}}
    finally:
        dm.stop()


def first_time(dm, ids, target, t0):
    """Seconds after t0 (wall) of the first val_acc >= target among ids."""
    q = ("SELECT MIN(time) FROM metrics WHERE name='val_acc' AND value >= ? AND time >= ? "
         "AND trial_id IN (%s)" % ",".join("?" * len(ids)))
    r = dm.sql(q, target, t0, *ids)[0][0]
    return None if r is None else r - t0


def best_after(dm, ids, t0):
    q = ("SELECT MAX(value) FROM metrics WHERE name='val_acc' AND time >= ? AND trial_id IN "
         "(%s)" % ",".join("?" * len(ids)))
    return dm.sql(q, t0, *ids)[0][0]


def phases(dm, t0, ids, target, judge=None):
    """Where the time went, seconds after t0: the fork's events (the
    parent's checkpoint, the siblings recorded, the decision, the first
    loser stopped), each trial's start (the dispatcher spawned it), its
    first report (data and checkpoint loaded: jizhi-train reports its
    kernels at the step after the checkpoint's), its first val_acc (the
    step, and when), its val_acc at the fork's judged step (judge: fork
    step + K; the fork arm) and its first val_acc >= target, and when it
    ended (a stopped sibling: its process gone)."""
    ev = dict((k, t - t0) for k, t in dm.sql(
        "SELECT kind, MIN(time) FROM events WHERE kind IN ('checkpoint', 'fork_started', "
        "'fork_decided', 'stopped') AND time >= ? GROUP BY kind", t0))
    out = {"events": ev, "trials": {}}
    for tid in ids:
        (started,) = dm.sql("SELECT started FROM trials WHERE id=?", tid)[0]
        lr = dm.sql("SELECT value FROM params WHERE trial_id=? AND name='lr' ORDER BY "
                    "generation DESC LIMIT 1", tid)
        first = dm.sql("SELECT MIN(time) FROM metrics WHERE trial_id=? AND time >= ?", tid,
                       t0)[0][0]
        hit = dm.sql("SELECT MIN(time) FROM metrics WHERE trial_id=? AND name='val_acc' "
                     "AND value >= ? AND time >= ?", tid, target, t0)[0][0]
        ev1 = dm.sql("SELECT step, time FROM metrics WHERE trial_id=? AND name='val_acc' "
                     "AND time >= ? ORDER BY step LIMIT 1", tid, t0)
        lr = lr[0][0] if lr else None
        judged = dm.sql("SELECT MIN(time) FROM metrics WHERE trial_id=? AND name='val_acc' "
                        "AND step >= ? AND time >= ?", tid, judge, t0)[0][0] if judge else None
        (ended,) = dm.sql("SELECT ended FROM trials WHERE id=?", tid)[0]
        out["trials"][str(tid)] = {
            "lr": lr, "started": started - t0 if started and started >= t0 else None,
            "first_report": first - t0 if first else None,
            "first_eval": [ev1[0][0], ev1[0][1] - t0] if ev1 else None,
            "target": hit - t0 if hit else None,
            "judged": judged - t0 if judged else None,
            "ended": ended - t0 if ended and ended >= t0 else None}
    return out


def print_phases(name, ph):
    ev = " ".join("%s %.2f s" % (k, v) for k, v in sorted(ph["events"].items(),
                                                          key=lambda x: x[1]))
    print("   %s: %s" % (name, ev or "-"))
    for tid, t in ph["trials"].items():
        f = lambda x: "-" if x is None else "%.2f s" % x
        e = t.get("first_eval")
        print("     trial %s lr %s: started %s, first report %s, first val_acc %s, "
              "judged %s, target %s, ended %s" % (
                  tid, t["lr"], f(t["started"]), f(t["first_report"]),
                  "step %d at %.2f s" % tuple(e) if e else "-", f(t.get("judged")),
                  f(t["target"]), f(t.get("ended"))))


def fork_arm(tmp, steps, fork_at, fork_steps, lrs, run=0):
    d = os.path.join(tmp, "fork%d" % run)
    os.makedirs(d)
    dm = Daemons(d, 3)
    try:
        sp = spec("fork", [lrs[0]], 1, steps)
        sp["budget"]["parallel"] = 3
        submit(dm, sp)
        dm.wait(lambda: dm.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0] == 1,
                120)
        (parent,) = dm.sql("SELECT id FROM trials")[0]
        dm.wait(lambda: dm.step(parent, "train_loss") >= fork_at, 600)
        t0 = time.time()
        r = dm.run("trial", "fork", str(parent), *["lr=%g" % x for x in lrs[1:]], "--force",
                   "--steps", str(fork_steps), "--no-wait")
        if r.returncode != 0:
            raise RuntimeError(r.stdout + r.stderr)
        dm.wait(lambda: dm.sql("SELECT COUNT(*) FROM trials WHERE state IN ('running', "
                               "'starting', 'pending')")[0][0] == 0, 1800)
        ids = [x for (x,) in dm.sql("SELECT id FROM trials")]
        iv = dm.sql("SELECT state, data FROM interventions WHERE trial_id=?", parent)
        data = json.loads(iv[0][1])
        return dm, ids, t0, {"fork_step": data.get("fork_step"),
                             "decision": data.get("reason"), "state": iv[0][0]}
    except Exception:
        dm.stop()
        raise


def restart_arm(tmp, steps, lrs, run=0):
    d = os.path.join(tmp, "restart%d" % run)
    os.makedirs(d)
    dm = Daemons(d, 3)
    try:
        dm.wait_dispatcher()
        t0 = time.time()
        submit(dm, spec("restart", lrs, len(lrs), steps))
        dm.wait(lambda: dm.sql("SELECT COUNT(*) FROM trials WHERE state IN ('completed', "
                               "'failed', 'stopped')")[0][0] == len(lrs), 1800)
        ids = [x for (x,) in dm.sql("SELECT id FROM trials")]
        return dm, ids, t0
    except Exception:
        dm.stop()
        raise


def fork_pair(tmp, steps, fork_at, lrs, run):
    """One fork arm and one restart arm, one after the other (odd runs
    start with the restart), each with its load average range."""
    arms = {}
    for arm in (("fork", "restart") if run % 2 == 0 else ("restart", "fork")):
        ls = LoadSampler()
        try:
            if arm == "fork":
                arms[arm] = fork_arm(tmp, steps, fork_at, 100, lrs, run)
            else:
                arms[arm] = restart_arm(tmp, steps, lrs, run)
        finally:
            load = ls.stop()
        arms[arm + "_load"] = load
    fdm, fids, ft0, finfo = arms["fork"]
    rdm, rids, rt0 = arms["restart"]
    try:
        fb, rb = best_after(fdm, fids, ft0), best_after(rdm, rids, rt0)
        target = min(fb, rb)
        tf, tr = first_time(fdm, fids, target, ft0), first_time(rdm, rids, target, rt0)
        fph = phases(fdm, ft0, fids, target, (finfo["fork_step"] or 0) + 100)
        rph = phases(rdm, rt0, rids, target)
    finally:
        fdm.stop()
        rdm.stop()
    return {"run": run, "first": "fork" if run % 2 == 0 else "restart",
            "steps": steps, "fork_at": finfo["fork_step"], "lrs": lrs,
            "decision": finfo["decision"], "best_fork": fb, "best_restart": rb,
            "target": target, "time_fork_s": tf, "time_restart_s": tr,
            "ratio": tf / tr if tf and tr else None,
            "load_fork": arms["fork_load"], "load_restart": arms["restart_load"],
            "phases_fork": fph, "phases_restart": rph}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=1, help="fork/restart pairs (default 1)")
    ap.add_argument("--only", choices=["bad", "fork"], help="one scenario")
    ap.add_argument("--no-data-cache", action="store_true",
                    help="trials decompress Fashion-MNIST at every start (jizhi-train "
                    "--data-cache off), as before the decompressed copies")
    ap.add_argument("--json", help="write the numbers here too")
    args = ap.parse_args()
    if args.no_data_cache:
        TRAIN_EXTRA.extend(["--data-cache", "off"])
    steps = 600 if args.quick else 1200
    fork_at = steps // 2
    cores = os.cpu_count() or 1
    if not os.access(JIZHI, os.X_OK):
        sys.exit("build first: %s is missing" % JIZHI)
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        print("bench-safety: skipped: Fashion-MNIST is not in /usr/share/datasets "
              "(scripts/install-deps.sh)")
        return
    tmp = tempfile.mkdtemp(prefix="jz-bench-safety-")
    out = {"cores": cores}
    try:
        if args.only != "fork":
            ls = LoadSampler()
            b = bad_change(tmp, steps)
            b["load"] = ls.stop()
            out["bad_change"] = b
            print("1. lr x20 at step %d of %d (lr 0.05 -> 1.0), load average %.1f-%.1f:"
                  % (b["change_at"], steps, *b["load"]))
            print("   final val_acc: control %.4f, unguarded %.4f, guarded %.4f (%s)" % (
                b["control_val_acc"] or 0, b["unguarded_val_acc"] or 0,
                b["guarded_val_acc"] or 0, b["guard"]))
            print("   guard: %s" % b["guard_reason"])
            print("   steps lost by the guarded trial: %s (made after its checkpoint, "
                  "undone)" % b["steps_lost"])
        if args.only == "bad":
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(out, f, indent=1)
            return
        lrs = [0.003, 0.03, 0.1]
        pairs = []
        print("2. choose lr among %s at step %d of %d: fork (--steps 100, the best "
              "sibling continues) vs restarting the candidates from scratch; time from "
              "the decision to val_acc >= the lower of the two arms' best; %d cores"
              % (lrs, fork_at, steps, cores))
        for run in range(args.runs):
            p = fork_pair(tmp, steps, fork_at, lrs, run)
            pairs.append(p)
            loaded = max(p["load_fork"][1], p["load_restart"][1]) > cores
            print("   pair %d (%s first): fork %.1f s, restart %.1f s, ratio %.2f; best "
                  "%.4f / %.4f, target %.4f; load average fork %.1f-%.1f, restart "
                  "%.1f-%.1f%s" % (
                      run + 1, p["first"], p["time_fork_s"], p["time_restart_s"],
                      p["ratio"], p["best_fork"], p["best_restart"], p["target"],
                      *p["load_fork"], *p["load_restart"],
                      "  (loaded: past %d)" % cores if loaded else ""))
            if args.runs == 1:
                print("   fork decision: %s" % p["decision"])
                print_phases("fork", p["phases_fork"])
                print_phases("restart", p["phases_restart"])
            sys.stdout.flush()
        out["fork"] = pairs
        ratios = [p["ratio"] for p in pairs if p["ratio"]]
        quiet = [p["ratio"] for p in pairs if p["ratio"] and
                 max(p["load_fork"][1], p["load_restart"][1]) <= cores]
        if ratios:
            print("   median of %d pairs: fork %.1f s, restart %.1f s, ratio %.2f "
                  "(range %.2f-%.2f; goal <= 0.5)" % (
                      len(ratios), statistics.median(p["time_fork_s"] for p in pairs),
                      statistics.median(p["time_restart_s"] for p in pairs),
                      statistics.median(ratios), min(ratios), max(ratios)))
            print("   fork phases, median seconds after `trial fork`: decided %s, kept "
                  "sibling at the target %.1f" % (
                      "%.1f" % statistics.median(
                          p["phases_fork"]["events"].get("fork_decided", float("nan"))
                          for p in pairs),
                      statistics.median(p["time_fork_s"] for p in pairs)))
            if quiet:
                print("   pairs with the load average <= %d all along: %d, median ratio "
                      "%.2f" % (cores, len(quiet), statistics.median(quiet)))
            else:
                print("   no pair ran with the load average <= %d all along: the goal "
                      "cannot be judged from these runs" % cores)
        out["median_ratio"] = statistics.median(ratios) if ratios else None
        out["median_ratio_quiet"] = statistics.median(quiet) if quiet else None
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
