"""Guarded live changes and live forks through the daemons (issue 42), on
tests/integration/progs/formula_trial.py (a deterministic score per lr and
step, checkpoints and loads): a change that makes the loss jump is
reverted within its watch window and the trial ends with the same score as
an unchanged control; a harmless change is kept; --guard on a program
that cannot checkpoint is refused with the reason and changes nothing; a
kill -9 of the controller during the watch window is resumed after its
restart; a fork of a running trial into 3 siblings continues the best
and stops two, with lineage in `trial show` and the export, and its
decision resumes after a kill -9 of the controller; a sibling that finds
no slot waits in the queue and the fork says why."""
import csv
import io
import json
import os
import re
import signal
import subprocess

import pytest

from conftest import JIZHI, PROGS, base_spec
from test_recovery import start_controller, start_dispatcher, stop

FORMULA = os.path.join(PROGS, "formula_trial.py")


def daemons(jz, slots=3):
    ep = f"ipc://{jz.dir}/ctl.sock"
    return ep, start_controller(jz, ep), start_dispatcher(jz, ep, slots)


def formula_spec(name, trials, steps, step_s, **env):
    spec = base_spec(name, ["python3", FORMULA], trials=trials, parallel=trials,
                     env={"FORMULA_STEPS": str(steps), "FORMULA_STEP_S": str(step_s), **env})
    spec["objective"] = {"metric": "score", "mode": "max"}
    spec["scheduler"] = {"type": "random", "seed": 1}
    spec["space"] = {"lr": {"type": "choice", "values": [0.1]}}
    return spec


def wait_steps(jz, tid, n):
    jz.wait_for(lambda: (jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND "
                                "name='train_loss'", tid)[0][0] or 0) >= n, 60, f"{n} steps")


def show(jz, tid):
    return json.loads(jz.run("trial", "show", str(tid), "--json", check=0).stdout)


def interventions(jz, tid):
    rows = jz.sql("SELECT kind, state, done, data FROM interventions WHERE trial_id=? "
                  "ORDER BY id", tid)
    return [{"kind": k, "state": s, "done": d, "data": json.loads(x)} for k, s, d, x in rows]


def test_guarded_change_reverted_on_divergence_kept_when_harmless(jz):
    # three trials at lr 0.1: one gets lr=4 (the formula's loss jumps x20
    # above lr 1), one lr=0.12 (harmless), one stays as the control
    ep, ctl, disp = daemons(jz)
    try:
        spec = formula_spec("guard", 3, 70, 0.05, FORMULA_SPIKE_STEP="0",
                            FORMULA_SPIKE_LR="1.0", FORMULA_SPIKE_KIND="spike")
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 3, 60, "3 running trials")
        bad, good, control = [r[0] for r in jz.sql("SELECT id FROM trials ORDER BY id")]
        wait_steps(jz, bad, 8)
        p = jz.run("trial", "set", str(bad), "lr=4.0", "--force", "--guard", "--watch-steps",
                   "4", timeout=60)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "guarded change reverted" in p.stdout and "train_loss" in p.stdout, p.stdout
        assert "back to lr=0.1 from the checkpoint" in p.stdout, p.stdout
        (iv,) = interventions(jz, bad)
        assert iv["kind"] == "guard" and iv["state"] == "reverted" and iv["done"] == 1
        ev = iv["data"]["evidence"]
        assert 1 <= ev["reports"] <= 4 and "average" in ev["what"]  # within K reports
        assert ev["before"]["n"] >= 3 and ev["checkpoint"]["step"] >= 8
        # the trial's params are the old ones again, as a new generation
        t = show(jz, bad)
        assert t["params"]["lr"] == 0.1 and t["generation"] == 2, t
        assert t["interventions"][0]["state"] == "reverted"
        text = jz.run("trial", "show", str(bad), check=0).stdout
        assert "changes      guard reverted" in text and "back to lr=0.1" in text, text

        wait_steps(jz, good, 8)
        p = jz.run("trial", "set", str(good), "lr=0.12", "--force", "--guard",
                   "--watch-steps", "3", timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "guarded change kept" in p.stdout and "3 reports watched" in p.stdout, p.stdout
        (iv,) = interventions(jz, good)
        assert iv["state"] == "kept" and iv["data"]["seen"] == 3

        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='completed'")[0][0]
                    == 3, 60, "the three trials to complete")
        vals = dict(jz.sql("SELECT id, value FROM trials"))
        # reverted to the checkpoint with the old lr: the same score as the
        # unchanged control, step for step; the kept change ends elsewhere
        assert abs(vals[bad] - vals[control]) < 1e-12, vals
        assert abs(vals[good] - vals[control]) > 1e-6, vals
        kinds = [e for (e,) in jz.sql("SELECT detail FROM events WHERE kind='guarded_change' "
                                      "AND applied=1")]
        assert len(kinds) == 2
    finally:
        stop(disp, ctl)


def test_guard_refused_without_checkpoints_and_values_mode(jz):
    ep, ctl, disp = daemons(jz, slots=1)
    try:
        spec = base_spec("nockpt", ["python3", os.path.join(PROGS, "live_trial.py")],
                         trials=1, parallel=1, env={"STEPS": "300"})
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 3, 60, "reports")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        lr0 = show(jz, tid)["params"]["lr"]
        p = jz.run("trial", "set", str(tid), "lr=0.05", "--guard", timeout=60)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "cannot checkpoint" in p.stderr and "--guard=values" in p.stderr, p.stderr
        assert "nothing was changed" in p.stderr
        t = show(jz, tid)
        assert t["generation"] == 0 and t["params"]["lr"] == lr0, t
        assert interventions(jz, tid)[0]["state"] == "refused"
        # values only: no checkpoint needed; kept (live_trial reports no loss)
        p = jz.run("trial", "set", str(tid), "lr=0.05", "--guard=values", "--watch-steps", "2",
                   timeout=60)
        assert p.returncode == 0 and "kept" in p.stdout, p.stdout + p.stderr
        t = show(jz, tid)
        assert t["generation"] == 1 and t["params"]["lr"] == 0.05, t
        # its score is its lr: 0.011 makes the objective worse by more than
        # the tolerance, so the old value is set back (no checkpoint)
        p = jz.run("trial", "set", str(tid), "lr=0.011", "--guard=values", "--watch-steps",
                   "2", timeout=60)
        assert p.returncode == 1 and "reverted" in p.stdout, p.stdout + p.stderr
        assert "score 0.011 after the change against 0.05 before" in p.stdout, p.stdout
        assert "back to lr=0.05 (values only)" in p.stdout, p.stdout
        t = show(jz, tid)
        assert t["generation"] == 3 and t["params"]["lr"] == 0.05, t
        # a fork needs a checkpoint too: refused, nothing created
        p = jz.run("trial", "fork", str(tid), "lr=0.02", "lr=0.03", timeout=60)
        assert p.returncode == 1 and "cannot checkpoint" in p.stderr, p.stdout + p.stderr
        assert jz.sql("SELECT COUNT(*) FROM trials") == [(1,)]
        p = jz.run("trial", "fork", str(tid), "--decide")
        assert p.returncode == 1 and "no fork under way" in p.stderr, p.stderr
        # usage errors
        p = jz.run("trial", "set", str(tid), "lr=0.05", "--guard=maybe")
        assert p.returncode == 2 and "--guard=values" in p.stderr
        p = jz.run("trial", "set", str(tid), "lr=0.05", "--watch-steps", "3")
        assert p.returncode == 2 and "go with --guard" in p.stderr
    finally:
        stop(disp, ctl)


def test_kill9_during_the_watch_window_resumes_the_decision(jz):
    ep, ctl, disp = daemons(jz, slots=1)
    ctl2 = None
    try:
        spec = formula_spec("guard-kill", 1, 200, 0.05)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, tid, 5)
        p = jz.run("trial", "set", str(tid), "lr=0.12", "--force", "--guard", "--watch-steps",
                   "12", "--no-wait", timeout=30)
        assert p.returncode == 0 and "not waited for" in p.stdout, p.stdout + p.stderr
        jz.wait_for(lambda: [i["state"] for i in interventions(jz, tid)] == ["watch"] and
                    interventions(jz, tid)[0]["data"]["seen"] >= 2, 30, "the watch window")
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=10)
        seen = interventions(jz, tid)[0]["data"]["seen"]
        assert seen < 12
        ctl2 = start_controller(jz, ep)
        jz.wait_for(lambda: interventions(jz, tid)[0]["done"] == 1, 60, "the decision")
        (iv,) = interventions(jz, tid)
        assert iv["state"] == "kept" and iv["data"]["seen"] == 12, iv
        t = show(jz, tid)
        assert t["generation"] == 1 and t["params"]["lr"] == 0.12, t
    finally:
        stop(disp, *([ctl2] if ctl2 else []), ctl)


def test_fork_into_three_siblings_keeps_the_best_after_a_kill9(jz):
    ep, ctl, disp = daemons(jz, slots=4)
    ctl2 = None
    try:
        spec = formula_spec("fork", 1, 90, 0.05)
        # the parent and two siblings fill the study's parallel budget: the
        # third sibling waits in the queue, and the fork says why
        spec["budget"]["parallel"] = 3
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (parent,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, parent, 5)
        # the formula is best at lr 0.1: the second sibling must win
        p = jz.run("trial", "fork", str(parent), "lr=0.01", "lr=0.1", "lr=1.0", "--force",
                   "--steps", "20", "--no-wait", timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
        jz.wait_for(lambda: interventions(jz, parent)[0]["state"] == "running", 30,
                    "the siblings")
        data = interventions(jz, parent)[0]["data"]
        sibs, fork_step = data["siblings"], data["fork_step"]
        assert len(sibs) == 3 and fork_step >= 5
        assert data.get("waiting"), data  # the queue's words
        assert jz.sql("SELECT state FROM trials WHERE id=?", sibs[2]) == [("pending",)]
        # stopping the control frees the slot: the third sibling starts
        jz.run("trial", "stop", str(parent), check=0)
        # the siblings start from the parent's checkpoint: their first step
        # is the one after it
        for s in sibs:
            jz.wait_for(lambda s=s: jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=?",
                                           s)[0][0] > 0, 30, "a sibling's reports")
            (first,) = jz.sql("SELECT MIN(step) FROM metrics WHERE trial_id=?", s)[0]
            assert first == fork_step + 1
        assert interventions(jz, parent)[0]["done"] == 0
        ctl.send_signal(signal.SIGKILL)  # before the decision (20 steps = 1 s)
        ctl.wait(timeout=10)
        assert interventions(jz, parent)[0]["done"] == 0
        ctl2 = start_controller(jz, ep)
        jz.wait_for(lambda: interventions(jz, parent)[0]["done"] == 1, 60, "the decision")
        (iv,) = interventions(jz, parent)
        dec = iv["data"]["decision"]
        assert iv["state"] == "decided" and dec["best"] == sibs[1], iv
        assert sorted(dec["stopped"]) == sorted([sibs[0], sibs[2]])
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state IN "
                                   "('running', 'pending', 'starting')")[0][0] == 0, 60,
                    "the trials to end")
        states = dict(jz.sql("SELECT id, state FROM trials"))
        assert states[parent] == "stopped" and states[sibs[1]] == "completed", states
        assert states[sibs[0]] == "stopped" and states[sibs[2]] == "stopped", states
        # lineage: trial show and the export name the parent and the values
        t = show(jz, sibs[1])
        assert t["parent"] == parent and t["generation"] == 1 and t["params"]["lr"] == 0.1
        assert t["interventions"][0]["kind"] == "fork"
        text = jz.run("trial", "show", str(sibs[1]), check=0).stdout
        assert "changes      fork decided" in text, text
        assert f"a sibling: trial {parent} forked at step {fork_step}" in text, text
        rows = list(csv.DictReader(io.StringIO(
            jz.run("study", "export", "fork", check=0).stdout)))
        by_id = {int(r["id"]): r for r in rows}
        assert all(by_id[s]["parent"] == str(parent) for s in sibs), rows
        assert by_id[parent]["parent"] == ""
        assert [float(by_id[s]["param_lr"]) for s in sibs] == [0.01, 0.1, 1.0]
    finally:
        stop(disp, *([ctl2] if ctl2 else []), ctl)


def test_a_waiting_client_learns_the_outcome_after_a_controller_kill9(jz):
    # `trial set --guard` and `trial fork` wait for their outcome; a kill -9
    # of the controller loses their request, the restarted controller
    # decides from the database, and the clients read it there (before:
    # both waited until their --timeout and failed with "no answer")
    ep, ctl, disp = daemons(jz, slots=3)
    ctls, clis = [ctl], []
    try:
        spec = formula_spec("wait-kill", 1, 400, 0.05)
        spec["budget"]["parallel"] = 3
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, tid, 5)
        cli = jz.popen("trial", "set", str(tid), "lr=0.12", "--force", "--guard",
                       "--watch-steps", "30", "--timeout", "40", stdout=subprocess.PIPE)
        clis.append(cli)
        jz.wait_for(lambda: [i["state"] for i in interventions(jz, tid)] == ["watch"] and
                    interventions(jz, tid)[0]["data"]["seen"] >= 2, 30, "the watch window")
        ctls[-1].send_signal(signal.SIGKILL)
        ctls[-1].wait(timeout=10)
        assert interventions(jz, tid)[0]["done"] == 0
        ctls.append(start_controller(jz, ep))
        out, err = cli.communicate(timeout=35)
        assert cli.returncode == 0, out + err
        assert f"trial {tid}: guarded change kept" in out, out + err
        assert "read from the database" in out, out
        # the same for a fork waiting for its decision
        cli = jz.popen("trial", "fork", str(tid), "lr=0.01", "lr=0.1", "--force", "--steps",
                       "60", "--timeout", "40", stdout=subprocess.PIPE)
        clis.append(cli)
        jz.wait_for(lambda: interventions(jz, tid)[-1]["state"] == "running", 30,
                    "the siblings")
        sibs = interventions(jz, tid)[-1]["data"]["siblings"]
        jz.wait_for(lambda: all(jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=?", s)
                                [0][0] > 0 for s in sibs), 30, "the siblings' reports")
        ctls[-1].send_signal(signal.SIGKILL)
        ctls[-1].wait(timeout=10)
        assert interventions(jz, tid)[-1]["done"] == 0
        ctls.append(start_controller(jz, ep))
        out, err = cli.communicate(timeout=35)
        assert cli.returncode == 0, out + err
        assert f"trial {tid}: fork decided: sibling {sibs[1]} is the best" in out, out + err
        assert "read from the database" in out, out
    finally:
        for p in clis:
            if p.poll() is None:
                p.kill()
        stop(disp, *reversed(ctls))


GUARD_PY = r"""
import json, sys
import jizhi
from jizhi.study import load_study
study = load_study("guard-py", db=sys.argv[1], controller=sys.argv[2])
bad, good = int(sys.argv[3]), int(sys.argv[4])
out = {"bad": study.set(bad, lr=4.0, force=True, guard=True, watch_steps=4),
       "good": study.set(good, lr=0.12, force=True, guard=True, watch_steps=3)}
try:
    study.set(bad, lr=0.2, guard=False, watch_steps=3)
except ValueError as e:
    out["usage"] = str(e)
try:
    study.set(99999, lr=0.2, force=True, guard=True)
except jizhi.JizhiError as e:
    out["refused"] = str(e)
print(json.dumps(out))
"""


def test_guarded_change_from_python(jz):
    # study.set(trial, lr=..., guard=True) returns kept/reverted with the
    # evidence, as `trial set --guard` does
    ep, ctl, disp = daemons(jz)
    try:
        spec = formula_spec("guard-py", 2, 70, 0.05, FORMULA_SPIKE_STEP="0",
                            FORMULA_SPIKE_LR="1.0", FORMULA_SPIKE_KIND="spike")
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 2, 60, "2 running trials")
        bad, good = [r[0] for r in jz.sql("SELECT id FROM trials ORDER BY id")]
        wait_steps(jz, bad, 8)
        wait_steps(jz, good, 8)
        prog = os.path.join(jz.dir, "guard.py")
        with open(prog, "w") as f:
            f.write(GUARD_PY)
        env = dict(jz.env, JIZHI_BIN=JIZHI)
        p = subprocess.run(["/usr/bin/python3", prog, jz.db, ep, str(bad), str(good)],
                           cwd=jz.dir, env=env, capture_output=True, text=True, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
        b, g = out["bad"], out["good"]
        assert b["outcome"] == "reverted" and b["kept"] is False, b
        assert b["values"] == {"lr": 4.0} and b["old"] == {"lr": 0.1}, b
        assert "train_loss" in b["reason"] and "back to lr=0.1" in b["reason"], b
        assert 1 <= b["evidence"]["reports"] <= 4 and b["evidence"]["before"]["n"] >= 3, b
        assert g["outcome"] == "kept" and g["kept"] is True, g
        assert "3 reports watched" in g["reason"], g
        assert "watch_steps and tolerance go with guard" in out["usage"], out
        assert "99999" in out["refused"], out
        assert [i["state"] for i in interventions(jz, bad)] == ["reverted"]
        assert [i["state"] for i in interventions(jz, good)] == ["kept"]
    finally:
        stop(disp, ctl)


def test_watch_shows_a_guarded_change_and_a_forks_lineage(jz):
    # `jizhi watch` (lines, no terminal) names a guarded change's outcome on
    # its trial and a fork's siblings, each with the trial and step it was
    # forked from and whether it was kept or stopped
    ep, ctl, disp = daemons(jz, slots=3)
    try:
        spec = formula_spec("lineage", 1, 100, 0.05)
        spec["budget"]["parallel"] = 3
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, tid, 5)
        jz.run("trial", "set", str(tid), "lr=0.12", "--force", "--guard", "--watch-steps",
               "3", timeout=60, check=0)
        jz.run("trial", "fork", str(tid), "lr=0.01", "lr=0.1", "--force", "--steps", "10",
               timeout=60, check=0)
        (data,) = [i["data"] for i in interventions(jz, tid) if i["kind"] == "fork"]
        s1, s2 = data["siblings"]
        step = data["fork_step"]
        # read from the database, then the same from the controller
        # (--controller: its metrics_since answer carries the study's
        # interventions; before, that watch showed no lineage)
        for where in (["--db", jz.db], ["--controller", ep]):
            p = jz.run("watch", "lineage", *where, "--interval", "0.1", timeout=90, check=0)
            lines = p.stdout.splitlines()
            last = {}
            for line in lines:
                m = re.match(r"trial (\d+) ", line)
                if m:
                    last[int(m.group(1))] = line
            assert f"| guard lr=0.12 kept; forked at step {step} into {s1} {s2}: best {s2}" \
                in last[tid], (where, lines)
            assert f"| fork of trial {tid} at step {step} (lr=0.01): stopped" in last[s1], \
                (where, lines)
            assert f"| fork of trial {tid} at step {step} (lr=0.1): kept" in last[s2], \
                (where, lines)
            assert last[s2].startswith(f"trial {s2} completed"), (where, lines)
    finally:
        stop(disp, ctl)


def test_fork_siblings_are_judged_at_fork_step_plus_k_not_the_next_evaluation(jz):
    # jizhi-train evaluating only at epoch ends (4 000 examples, batch 2:
    # 2 000 steps), forked with --steps 7: each sibling is started with
    # JIZHI_EVAL_AT_STEP = fork step + 7 and reports val_acc there, and the
    # fork decides on those values while the siblings still run (before,
    # it waited for their next evaluation, the epoch's end)
    ep, ctl, disp = daemons(jz)
    try:
        spec = base_spec("judge", ["jizhi-train", "--dataset", "synthetic", "--synthetic-n",
                                   "4000", "--val-size", "100", "--hidden", "16",
                                   "--batch-size", "2", "--epochs", "1000",
                                   "--eval-every", "0", "--log-every", "5", "--threads", "1",
                                   "--quiet"], trials=1, parallel=3)
        spec["objective"] = {"metric": "val_acc", "mode": "max"}
        spec["space"] = {"lr": {"type": "choice", "values": [0.05]}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (parent,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, parent, 10)
        p = jz.run("trial", "fork", str(parent), "lr=0.01", "lr=0.2", "--force", "--steps",
                   "7", "--no-wait", timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
        jz.wait_for(lambda: interventions(jz, parent)[0]["done"] == 1, 60, "the decision")
        (iv,) = interventions(jz, parent)
        data = iv["data"]
        at = data["fork_step"] + 7
        for s in data["siblings"]:
            rows = dict(jz.sql("SELECT step, value FROM metrics WHERE trial_id=? AND "
                               "name='val_acc'", s))
            # evaluated at fork step + 7 (and at an epoch's end on the way, if one fell
            # in between), judged there
            assert at in rows, (s, at, rows)
            assert data["results"][str(s)] == rows[at], data
        assert iv["state"] == "decided" and data["decision"]["how"] == "after the steps", iv
        best = data["decision"]["best"]
        assert data["decision"]["value"] == data["results"][str(best)]
        # the kept sibling goes on past the judged step, the other was stopped
        jz.wait_for(lambda: (jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?",
                                    best)[0][0] or 0) > at + 20, 60, "the kept sibling")
        (other,) = [s for s in data["siblings"] if s != best]
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=?", other)[0][0]
                    == "stopped", 30, "the other sibling stopped")
    finally:
        jz.run("study", "stop", "judge", check=0)
        stop(disp, ctl)


# A PyTorch program through jizhi.torch: a linear model on fixed random
# data that evaluates only when a fork asks for it (ctl.eval_due).
TORCH_TRIAL = """
import time, torch, jizhi, jizhi.torch
torch.manual_seed(0)
torch.set_num_threads(1)
t = jizhi.Trial()
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=t.param("lr", 0.05))
ctl = jizhi.torch.attach(t, opt, model=model, report_every=5)
x = torch.randn(256, 8, generator=torch.Generator().manual_seed(1))
y = (x[:, 0] > 0).long()
while True:
    i = ctl.global_step % 32
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x[i * 8:i * 8 + 8]), y[i * 8:i * 8 + 8])
    loss.backward()
    opt.step()
    if not ctl.step(loss=loss):
        break
    if ctl.eval_due:
        with torch.no_grad():
            ctl.report_eval(val_acc=(model(x).argmax(1) == y).float().mean().item())
    time.sleep(0.005)
t.close()
"""


def test_fork_of_a_pytorch_program_judges_its_siblings_at_fork_step_plus_k(jz):
    # jizhi.torch reads JIZHI_EVAL_AT_STEP: ctl.eval_due is True at fork
    # step + K, where this program evaluates (it evaluates nowhere else), so
    # the fork decides on the siblings' val_acc at exactly that step
    from torchutil import PY, has_torch
    if not has_torch():
        pytest.skip("%s has no torch (python3-torch)" % PY)
    ep, ctl, disp = daemons(jz)
    try:
        prog = os.path.join(jz.dir, "torch_fork.py")
        with open(prog, "w") as f:
            f.write(TORCH_TRIAL)
        spec = base_spec("tfork", [PY, prog], trials=1, parallel=3)
        spec["objective"] = {"metric": "val_acc", "mode": "max"}
        spec["space"] = {"lr": {"type": "choice", "values": [0.05]}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (parent,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, parent, 10)
        p = jz.run("trial", "fork", str(parent), "lr=0.01", "lr=0.5", "--force", "--steps",
                   "7", "--no-wait", timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
        jz.wait_for(lambda: interventions(jz, parent)[0]["done"] == 1, 60, "the decision")
        (iv,) = interventions(jz, parent)
        data = iv["data"]
        at = data["fork_step"] + 7
        for s in data["siblings"]:
            rows = jz.sql("SELECT step, value FROM metrics WHERE trial_id=? AND "
                          "name='val_acc'", s)
            assert [r[0] for r in rows] == [at], (s, at, rows)  # there, and only there
            assert data["results"][str(s)] == rows[0][1], data
        assert iv["state"] == "decided" and data["decision"]["how"] == "after the steps", iv
        (other,) = [s for s in data["siblings"] if s != data["decision"]["best"]]
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=?", other)[0][0]
                    == "stopped", 30, "the other sibling stopped")
    finally:
        jz.run("study", "stop", "tfork", check=0)
        stop(disp, ctl)


def test_pytorch_eval_due_at_the_step_and_a_bad_value_refused(tmp_path):
    # standalone (no controller): eval_due is True once, at the step
    # JIZHI_EVAL_AT_STEP names; a value that is not a step is refused at
    # attach with the variable named
    from conftest import ROOT
    from torchutil import PY, has_torch
    if not has_torch():
        pytest.skip("%s has no torch (python3-torch)" % PY)
    prog = ("import torch, jizhi, jizhi.torch\n"
            "m = torch.nn.Linear(2, 1)\n"
            "ctl = jizhi.torch.attach(jizhi.Trial(), torch.optim.SGD(m.parameters(), lr=0.1))\n"
            "print([s for s in range(1, 12) if ctl.step() and ctl.eval_due])\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "trial_helper", "python"),
               JIZHI_EVAL_AT_STEP="7", JIZHI_TORCH_QUIET="1")
    env.pop("JIZHI_TRIAL", None)
    p = subprocess.run([PY, "-c", prog], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[7]", p.stdout + p.stderr
    env["JIZHI_EVAL_AT_STEP"] = "seven"
    p = subprocess.run([PY, "-c", prog], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode != 0 and "JIZHI_EVAL_AT_STEP: expected a step from 1, got 'seven'" \
        in p.stderr, p.stderr
