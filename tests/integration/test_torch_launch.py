"""DDP trials started by the dispatcher (`"trial": {"ranks": 2, "launcher":
"torch"}`, dispatcher/disp_torch.c) against real daemons: each rank gets
torchrun's environment and the trial's JIZHI_* variables, only rank 0's
helper talks to the controller, a `jizhi trial set lr=...` reaches both
ranks' optimizers at the same step (jizhi.torch broadcasts rank 0's
instructions), and a rank killed with SIGKILL ends the trial with the
rank, its signal and its last stderr line as the reason, the other rank
gone too.

The ranks are plain torch DDP programs with gloo on CPU, run by Debian's
/usr/bin/python3 (python3-torch) on a Fashion-MNIST subset with the
example's model (examples/torch/train.py); those tests skip, saying why,
where it has no torch or the dataset is missing. The launcher's own
tests (its log lines, a trial it ends on a timeout) run /bin/sh ranks.
"""
import os
import re
import signal
import textwrap

from conftest import base_spec
from test_recovery import stop
from torchutil import EXAMPLE, PY, daemons, needs_fmnist, needs_torch, records

TORCH = [needs_torch("torch.distributed"), needs_fmnist()]


def with_torch(test):
    for mark in TORCH:
        test = mark(test)
    return test

# One rank: plain DDP over gloo, jizhi.torch attached. $LOG.<rank> gets one
# JSON line with the rank's environment, then one per step with the lr its
# optimizer holds after ctl.step; $LOG.<rank>.pid its pid.
RANK = textwrap.dedent("""
    import json, os, sys, time
    import gc, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    sys.path.insert(0, %(example)r)
    from train import fashion_mnist, Net
    import jizhi, jizhi.torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    base = os.environ["LOG"] + ".%%d" %% rank
    with open(base + ".pid", "w") as f:
        f.write(str(os.getpid()))
    log = open(base, "a")
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "JIZHI_RANK", "JIZHI_RANKS", "JIZHI_TRIAL", "OMP_NUM_THREADS")
    log.write(json.dumps({"env": {k: os.environ.get(k) for k in keys},
                          "world": dist.get_world_size()}) + "\\n")
    log.flush()
    t = jizhi.Trial()
    net = nn.parallel.DistributedDataParallel(Net(4))
    opt = torch.optim.SGD(net.parameters(), lr=t.param("lr", 0.01), momentum=0.9)
    ctl = jizhi.torch.attach(t, opt, model=net, report_every=5)
    for x, y in ctl.loader(fashion_mnist("train", 1024), batch_size=16, shuffle=True,
                           epochs=1000):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        ok = ctl.step()
        log.write(json.dumps({"step": ctl.global_step,
                              "lr": opt.param_groups[0]["lr"]}) + "\\n")
        log.flush()
        if not ok:
            break
        if rank == 1:
            print("rank 1 at step %%d" %% ctl.global_step, file=sys.stderr, flush=True)
        time.sleep(0.02)
    t.close()
    del ctl, opt, net  # the DDP model (its reducer holds the group) before the group
    gc.collect()
    dist.destroy_process_group()
""") % {"example": EXAMPLE}


def steps(path):
    return [r for r in records(path) if "step" in r]


def submit_ddp(jz, name, log):
    prog = os.path.join(jz.dir, name + ".py")
    with open(prog, "w") as f:
        f.write(RANK)
    spec = base_spec(name, [PY, prog], trials=1, parallel=1, env={"LOG": log}, ranks=2,
                     launcher="torch")
    spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1}}
    spec["trial"]["timeout_s"] = 180
    jz.run("study", "submit", jz.write_spec(spec), check=0)
    for r in (0, 1):
        jz.wait_for(lambda: len(steps(log + ".%d" % r)) > 0, 90, "rank %d training" % r)
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0, 60,
                "rank 0's first report")
    return jz.sql("SELECT id FROM trials ORDER BY id")[0][0]


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@with_torch
def test_set_lr_reaches_both_ranks_at_the_same_step(jz):
    ctl, disp = daemons(jz)
    log = os.path.join(jz.dir, "rank")
    try:
        tid = submit_ddp(jz, "ddp", log)
        # torchrun's environment, one rank each, the trial's identity on both
        envs = [records(log + ".%d" % r)[0] for r in (0, 1)]
        for r, e in enumerate(envs):
            assert e["world"] == 2
            assert {k: e["env"][k] for k in ("RANK", "LOCAL_RANK", "JIZHI_RANK")} == \
                {"RANK": str(r), "LOCAL_RANK": str(r), "JIZHI_RANK": str(r)}, e
            assert (e["env"]["WORLD_SIZE"], e["env"]["LOCAL_WORLD_SIZE"],
                    e["env"]["JIZHI_RANKS"], e["env"]["MASTER_ADDR"]) == \
                ("2", "2", "2", "127.0.0.1"), e
            assert e["env"]["JIZHI_TRIAL"] == str(tid)
        assert envs[0]["env"]["MASTER_PORT"] == envs[1]["env"]["MASTER_PORT"]
        for lr in ("0.0333", "0.0444"):
            p = jz.run("trial", "set", str(tid), "lr=" + lr)
            assert p.returncode == 0 and "acknowledged" in p.stdout, p.stdout + p.stderr
            at = []
            for r in (0, 1):
                path = log + ".%d" % r
                jz.wait_for(lambda: any(x["lr"] == float(lr) for x in steps(path)), 30,
                            "rank %d to log lr %s" % (r, lr))
                at.append(next(x["step"] for x in steps(path) if x["lr"] == float(lr)))
            assert at[0] == at[1], at
        # only rank 0 reports: every stored point once
        dup = jz.sql("SELECT COUNT(*) FROM (SELECT step, name, COUNT(*) c FROM metrics "
                     "WHERE trial_id=? GROUP BY step, name HAVING c > 1)", tid)[0][0]
        assert dup == 0
        jz.run("trial", "stop", str(tid), check=0)
        jz.wait_trial_state(tid, "stopped", 60, "both ranks to stop")
        ends = [steps(log + ".%d" % r)[-1]["step"] for r in (0, 1)]
        assert ends[0] == ends[1], ends
    finally:
        stop(ctl, disp)


@with_torch
def test_a_rank_killed_ends_the_trial_with_its_reason(jz):
    ctl, disp = daemons(jz)
    log = os.path.join(jz.dir, "rank")
    try:
        tid = submit_ddp(jz, "ddpkill", log)
        pids = []
        for r in (0, 1):
            with open(log + ".%d.pid" % r) as f:
                pids.append(int(f.read()))
        assert all(alive(p) for p in pids)
        os.kill(pids[1], signal.SIGKILL)
        jz.wait_trial_state(tid, "failed", 60, "the trial to fail")
        (reason,) = jz.sql("SELECT reason FROM trials WHERE id=?", tid)[0]
        assert "killed by signal 9" in reason, reason
        assert ("rank 1 of 2 (pid %d) was killed by signal 9 (SIGKILL); its last stderr "
                "line: rank 1 at step" % pids[1]) in reason, reason
        jz.wait_for(lambda: not alive(pids[0]), 30, "rank 0 to be gone")
        p = jz.run("trial", "show", str(tid))
        assert p.returncode == 0 and "rank 1 of 2 (pid %d)" % pids[1] in p.stdout, p.stdout
    finally:
        stop(ctl, disp)


# Each rank writes a line in two parts with a pause between (as Python's
# stderr writes a text and its newline apart), a stdout line and an empty
# one, a 70000-byte "line" without a newline, then a last line without one.
LINES = r"""printf 'rank %s part-a ' "$RANK" >&2; sleep 0.3; printf 'part-b\n' >&2
echo "out $RANK"; echo
head -c 70000 /dev/zero | tr '\0' x >&2; echo >&2
printf 'rank %s no newline' "$RANK" >&2
"""


def test_the_ranks_logs_are_whole_lines_prefixed_with_the_rank(jz):
    prog = os.path.join(jz.dir, "lines.sh")
    with open(prog, "w") as f:
        f.write(LINES)
    spec = base_spec("lines", ["/bin/sh", prog], trials=1, parallel=1, ranks=2,
                     launcher="torch")
    jz.run("run", jz.write_spec(spec), "--slots", "2")
    (tid,) = jz.sql("SELECT id FROM trials")[0]
    err = jz.run("trial", "logs", str(tid), "--stderr", check=0).stdout.splitlines()
    out = jz.run("trial", "logs", str(tid), check=0).stdout.splitlines()
    for r in (0, 1):
        mine = [line for line in err if line.startswith("[rank%d]: " % r)]
        assert "[rank%d]: rank %d part-a part-b" % (r, r) in mine, err[:4]
        # the long line in 64 KiB pieces, each a line of its own
        assert ["[rank%d]: " % r + "x" * 65536, "[rank%d]: " % r + "x" * (70000 - 65536)] == \
            [line for line in mine if "xx" in line]
        assert mine[-1] == "[rank%d]: rank %d no newline" % (r, r), mine[-1][:80]
        assert out.index("[rank%d]: out %d" % (r, r)) + 1 == out.index("[rank%d]:" % r), out
    assert all(line.startswith(("[rank0]: ", "[rank1]: ")) for line in err), \
        [line[:80] for line in err]
    assert sorted(out) == ["[rank0]:", "[rank0]: out 0", "[rank1]:", "[rank1]: out 1"], out


# rank 0 waits (as in an all-reduce), rank 1 hangs, rank 2 ends at once
HANG = r"""case $RANK in
0) echo "rank 0 waiting for the others" >&2; exec sleep 1000;;
1) echo "rank 1 hanging on purpose" >&2; exec sleep 1000;;
*) echo "rank $RANK done" >&2;;
esac
"""


def test_a_timeout_names_no_rank_as_the_cause(jz):
    prog = os.path.join(jz.dir, "hang.sh")
    with open(prog, "w") as f:
        f.write(HANG)
    spec = base_spec("hang", ["/bin/sh", prog], trials=1, parallel=1, ranks=3,
                     launcher="torch", timeout_s=3)
    jz.run("run", jz.write_spec(spec), "--slots", "3")
    (tid, state, how, reason), = jz.sql("SELECT id, state, exit_how, reason FROM trials")
    assert (state, how) == ("failed", "timeout"), (state, how, reason)
    # the dispatcher's SIGTERM ended the ranks: none is blamed for it
    assert "was killed by signal" not in reason, reason
    assert reason == (
        "killed after timeout_s=3; stderr: jizhi: SIGTERM (stop, kill or timeout) ended the "
        "3 ranks; last stderr lines: rank 0: rank 0 waiting for the others; rank 1: rank 1 "
        "hanging on purpose; rank 2 (had exited 0): rank 2 done"), reason
    err = jz.run("trial", "logs", str(tid), "--stderr", check=0).stdout
    assert re.search(r"jizhi: rank 1 of 3 \(pid \d+\) was running when the SIGTERM came; "
                     r"its last stderr line \(\d+ s before the SIGTERM\): rank 1 hanging on "
                     r"purpose\n", err), err
    assert re.search(r"jizhi: rank 2 of 3 \(pid \d+\) had exited with code 0 before the "
                     r"SIGTERM came; its last stderr line", err), err


# rank 0 ignores SIGTERM (as a rank whose own handler waits on a hung
# collective) and leaves a line without its newline before a long wait;
# rank 1 ends on SIGTERM
DEAF = r"""echo $$ > "$RANK.pid"
case $RANK in
0) trap '' TERM; printf 'rank 0 epoch 3: ' >&2; exec sleep 1000;;
*) echo "rank $RANK waiting" >&2; exec sleep 1000;;
esac
"""


def test_a_rank_that_outlives_sigterm_leaves_its_lines_and_the_summary(jz):
    prog = os.path.join(jz.dir, "deaf.sh")
    with open(prog, "w") as f:
        f.write(DEAF)
    spec = base_spec("deaf", ["/bin/sh", prog], trials=1, parallel=1, ranks=2,
                     launcher="torch", timeout_s=2)
    run = jz.popen("run", jz.write_spec(spec), "--slots", "2")
    try:
        # the partial line reaches the log while its rank still runs
        pid_file = os.path.join(jz.dir, "0.pid")
        jz.wait_for(lambda: os.path.exists(pid_file) and open(pid_file).read().endswith("\n"),
                    30, "rank 0")
        with open(pid_file) as f:
            pid0 = int(f.read())
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        jz.wait_for(lambda: "[rank0]: rank 0 epoch 3: \n" in jz.run(
            "trial", "logs", str(tid), "--stderr").stdout, 30, "rank 0's partial line")
        assert alive(pid0)
        assert run.wait(timeout=60) != 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    # the launcher SIGKILLed rank 0 before the dispatcher's SIGKILL ended it:
    # its summary is the reason
    (state, how, reason), = jz.sql("SELECT state, exit_how, reason FROM trials")
    assert (state, how) == ("failed", "timeout"), (state, how, reason)
    assert reason == (
        "killed after timeout_s=2; stderr: jizhi: SIGTERM (stop, kill or timeout) ended the "
        "2 ranks; last stderr lines: rank 0: rank 0 epoch 3:; rank 1: rank 1 waiting"), reason
    err = jz.run("trial", "logs", str(tid), "--stderr", check=0).stdout
    assert re.search(r"jizhi: rank 0 of 2 \(pid %d\) was running when the SIGTERM came; "
                     r"its last stderr line \(\d+ s before the SIGTERM\): rank 0 epoch 3:\n"
                     % pid0, err), err
    assert not alive(pid0)
