"""Multi-rank trials through the dispatcher (`trial.ranks`): the command runs
under mpirun as one attempt; a crashed rank or a timeout ends every rank
(no process left) and a retry restarts them all; a study with `ranks: 2`
runs end to end with the batch-size scheduler; without MPI the study is
refused with a clear message; a launcher that leaves a rank unreaped is
killed, one whose ranks end far apart is not.
Skipped when mpirun is not installed."""
import os
import re
import shutil
import signal

import pytest

from conftest import BUILD

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")
TRAIN = os.path.join(BUILD, "bin", "jizhi-train")
LONG = [TRAIN, "--dataset", "synthetic", "--synthetic-n", "2000", "--val-size", "200",
        "--hidden", "16", "--epochs", "100000", "--max-steps", "3000000", "--batch-size", "32",
        "--log-every", "20", "--threads", "1", "--quiet"]


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(d))
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        return st[st.rindex(")") + 2] != "Z"
    except OSError:
        return False


def ranks_of(launcher):
    """The jizhi-train ranks under the launcher (direct children, or under an orted)."""
    found = []
    todo = [launcher]
    while todo:
        p = todo.pop()
        for c in children(p):
            try:
                exe = os.readlink(f"/proc/{c}/exe")
            except OSError:
                continue
            if exe.endswith("jizhi-train"):
                found.append(c)
            else:
                todo.append(c)
    return found


def spec(name, **trial):
    t = {"command": LONG, "ranks": 2, "timeout_s": 120, "retries": 0}
    t.update(trial)
    return {"name": name, "objective": {"metric": "val_acc", "mode": "max"},
            "scheduler": {"type": "random", "seed": 1}, "budget": {"trials": 1, "parallel": 1},
            "space": {"momentum": {"type": "float", "low": 0.5, "high": 0.9}}, "trial": t}


def wait_running(jz, attempt=0):
    def ready():
        rows = jz.sql("SELECT id, pid, attempt, state FROM trials")
        if not rows or rows[0][2] != attempt or rows[0][3] != "running" or not rows[0][1]:
            return False
        return len(ranks_of(rows[0][1])) == 2
    jz.wait_for(ready, timeout=90, what=f"attempt {attempt} running with 2 ranks")
    tid, pid = jz.sql("SELECT id, pid FROM trials")[0]
    return tid, pid, ranks_of(pid)


def test_one_rank_killed_fails_the_attempt_and_a_retry_restarts_all(jz):
    run = jz.popen("run", jz.write_spec(spec("kill1", retries=1)), "--slots", "2")
    try:
        tid, launcher, ranks = wait_running(jz, 0)
        os.kill(ranks[1], signal.SIGKILL)  # one rank crashes
        _, launcher2, ranks2 = wait_running(jz, 1)  # the retry: both ranks anew
        assert not set(ranks2) & set(ranks)
        for p in [launcher, *ranks]:
            jz.wait_for(lambda: not alive(p), timeout=30, what=f"pid {p} of attempt 0 gone")
        # this time the launcher is killed outright: no rank may outlive it
        os.kill(launcher2, signal.SIGKILL)
        run.wait(timeout=120)
        state, attempt, how = jz.sql("SELECT state, attempt, exit_how FROM trials")[0]
        assert state == "failed" and attempt == 1, (state, attempt, how)
        for p in [launcher2, *ranks2]:
            jz.wait_for(lambda: not alive(p), timeout=30, what=f"pid {p} of attempt 1 gone")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


HUNG_MPIRUN = """#!/bin/sh
# a launcher that never notices its ranks end: starts -np copies, then
# waits forever without reaping them (as OpenMPI 4.1's mpirun can when a
# rank dies during MPI_Init)
[ "$1" = --oversubscribe ] && [ "$2" = -np ] || exit 3
n=$3; shift 3
i=0
while [ $i -lt $n ]; do RANK=$i "$@" & i=$((i + 1)); done
exec sleep 100000
"""
# rank 1 fails after 2 s, rank 0 would run for 1000 s
RANK_SCRIPT = 'if [ "$RANK" = 1 ]; then sleep 2; exit 1; fi; exec sleep 1000'


def test_a_hung_launcher_is_killed_when_a_rank_ends(jz):
    fake = os.path.join(jz.dir, "fakempi")
    os.makedirs(fake)
    with open(os.path.join(fake, "mpirun"), "w") as f:
        f.write(HUNG_MPIRUN)
    os.chmod(os.path.join(fake, "mpirun"), 0o755)
    jz.env["PATH"] = fake + os.pathsep + jz.env["PATH"]
    s = spec("hung", command=["/bin/sh", "-c", RANK_SCRIPT], timeout_s=300)
    p = jz.run("run", jz.write_spec(s), "--slots", "2", timeout=120)
    state, how, reason = jz.sql("SELECT state, exit_how, reason FROM trials")[0]
    assert p.returncode != 0 and state == "failed", (state, how, reason, p.stderr)
    assert "killed by signal 9" in reason, reason
    assert how == "signaled", how  # not timeout_s: the dispatcher ended the hung launcher
    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                return f.read().replace("\0", " ")
        except OSError:
            return ""
    left = [d for d in os.listdir("/proc") if d.isdigit() and "sleep 1000" in cmdline(d)
            and alive(int(d))]
    assert not left, left


def test_ranks_that_end_far_apart_are_waited_for(jz):
    # rank 1 ends at once, rank 0 after 13 s: mpirun reaps rank 1 and waits,
    # and the dispatcher must not take that for a hung launcher
    script = ('if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then sleep 13; echo done > rank0; fi; '
              'exit 0')
    s = spec("apart", command=["/bin/sh", "-c", script], timeout_s=300)
    jz.run("run", jz.write_spec(s), "--slots", "2", timeout=120)
    state, how, reason = jz.sql("SELECT state, exit_how, reason FROM trials")[0]
    assert how == "exited" and "without reporting its objective" in reason, (how, reason)
    assert os.path.exists(os.path.join(jz.dir, "rank0")), "rank 0 ran to its end"


def test_timeout_ends_every_rank(jz):
    run = jz.popen("run", jz.write_spec(spec("tmo", timeout_s=8)), "--slots", "2")
    try:
        tid, launcher, ranks = wait_running(jz, 0)
        run.wait(timeout=120)
        state, how = jz.sql("SELECT state, exit_how FROM trials")[0]
        assert state == "failed" and how == "timeout", (state, how)
        for p in [launcher, *ranks]:
            jz.wait_for(lambda: not alive(p), timeout=30, what=f"pid {p} gone")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_without_mpi_ranks_are_refused(jz):
    jz.env["PATH"] = os.path.join(BUILD, "bin")  # no mpirun here
    p = jz.run("run", jz.write_spec(spec("nompi")), check=1)
    assert "trial.ranks = 2 needs MPI: mpirun is not on PATH" in p.stderr
    p = jz.run("run", jz.write_spec(spec("few")), "--slots", "1", check=None)
    assert p.returncode != 0


def test_study_with_two_ranks_and_the_batchsize_scheduler(jz):
    s = {
        "name": "bs-ranks",
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "batchsize", "seed": 1, "min": 32, "max": 512, "interval": 40,
                      "warmup": 10, "min_measurements": 2, "min_gain": 0},
        "budget": {"trials": 1, "parallel": 1},
        "space": {"lr": {"type": "float", "low": 0.05, "high": 0.05},
                  "batch_size": {"type": "int", "low": 512, "high": 512}},
        "trial": {"command": [TRAIN, "--dataset", "synthetic", "--synthetic-n", "12000",
                              "--val-size", "500", "--hidden", "256,256", "--epochs", "6",
                              "--log-every", "5", "--threads", "1", "--quiet"],
                  "ranks": 2, "timeout_s": 240, "retries": 0},
    }
    p = jz.run("run", jz.write_spec(s), timeout=400, check=0)
    state, value = jz.sql("SELECT state, value FROM trials")[0]
    assert state == "completed" and value > 0.5, (state, value, p.stdout)
    (tid,) = jz.sql("SELECT id FROM trials")[0]
    sets = jz.sql("SELECT detail FROM events WHERE kind='instruction' AND who='batchsize' "
                  "AND trial_id=? AND applied=1", tid)
    assert sets, "the scheduler changed the batch size of the 2-rank trial"
    # the gradient-noise inputs come from the ranks: B_small is a rank's shard
    smalls = jz.sql("SELECT value, step FROM metrics WHERE trial_id=? AND name='batch_small'", tid)
    bigs = dict((s_, v) for v, s_ in jz.sql(
        "SELECT value, step FROM metrics WHERE trial_id=? AND name='batch_big'", tid))
    assert smalls and all(v == bigs[s_] // 2 for v, s_ in smalls)
    err = jz.run("trial", "logs", str(tid), "--stderr").stdout
    assert "rank 1: instruction" in err and "set batch_size" in err


def test_pbt_over_two_rank_trials(jz):
    # PBT's checkpoint and load reach both ranks of each trial: rank 0 writes
    # the checkpoint once, every rank loads the donor's, and the trial's new
    # params are broadcast from rank 0
    s = {
        "name": "pbt-ranks",
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "pbt", "seed": 3, "interval": 60},
        "budget": {"trials": 2, "parallel": 2},
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 0.5, "log": True}},
        "trial": {"command": [TRAIN, "--dataset", "synthetic", "--synthetic-n", "6000",
                              "--val-size", "500", "--hidden", "128,128", "--epochs", "3",
                              "--batch-size", "64", "--eval-every", "30", "--threads", "1",
                              "--quiet"],
                  "ranks": 2, "timeout_s": 180, "retries": 0},
    }
    p = jz.run("run", jz.write_spec(s), "--slots", "4", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    states = jz.sql("SELECT state FROM trials")
    assert all(st == "completed" for (st,) in states), states
    rows = jz.sql("SELECT trial_id, applied, result, detail FROM events WHERE kind='instruction'")
    loads = [r for r in rows if '"load"' in (r[3] or "")]
    assert any(r[1] == 1 for r in loads), rows
    for tid, applied, _, _ in loads:
        if applied == 1:
            err = jz.run("trial", "logs", str(tid), "--stderr").stdout
            assert "rank 0: instruction" in err and "rank 1: instruction" in err
            assert re.search(r"rank 1: instruction \d+ \(load\) applied", err), err
