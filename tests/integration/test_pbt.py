"""PBT and the divergence guard end to end: `jizhi run` on studies over
tests/integration/progs/formula_trial.py (a fake trial whose score follows
a formula of lr and step) and over jizhi-train, checked in the SQLite
database: lineage in the params table, checkpoint/load instructions
applied, receivers' scores jumping to their donors', the guard rolling a
planted divergence back with a lower lr, and the restart fallback for a
program that does not poll."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD, PROGS  # noqa: E402

FORMULA = os.path.join(PROGS, "formula_trial.py")


def formula_spec(name, scheduler, trials=4, parallel=4, env=None, guard=None, lr=None):
    spec = {
        "name": name,
        "objective": {"metric": "score", "mode": "max"},
        "scheduler": scheduler,
        "budget": {"trials": trials, "parallel": parallel},
        "space": {"lr": lr or {"type": "float", "low": 1e-4, "high": 10.0, "log": True}},
        "trial": {"command": ["python3", FORMULA], "timeout_s": 60, "retries": 0,
                  "env": env or {}},
    }
    if guard is not None:
        spec["guard"] = guard
    return spec


def events(jz, study, kind=None):
    rows = jz.sql("SELECT e.id, e.trial_id, e.who, e.kind, e.detail, e.applied, e.time, e.result "
                  "FROM events e "
                  "JOIN studies s ON s.id = e.study_id WHERE s.name = ? ORDER BY e.id", study)
    out = []
    for r in rows:
        d = json.loads(r[4]) if r[4] else {}
        out.append({"id": r[0], "trial": r[1], "who": r[2], "kind": r[3], "detail": d,
                    "applied": r[5], "time": r[6], "result": r[7]})
    return [e for e in out if kind is None or e["kind"] == kind]


def instructions(jz, study, kind):
    return [e for e in events(jz, study, "instruction") if e["detail"].get("kind") == kind]


def test_pbt_exploits_live_with_lineage(jz):
    spec = formula_spec("pbt-formula", {"type": "pbt", "seed": 5, "interval": 10})
    spec["trial"]["env"] = {"FORMULA_STEPS": "60", "FORMULA_STEP_S": "0.03"}
    p = jz.run("run", jz.write_spec(spec), timeout=90)
    assert p.returncode == 0, p.stderr
    states = jz.sql("SELECT state FROM trials")
    assert states and all(s == "completed" for (s,) in states), states

    loads = instructions(jz, "pbt-formula", "load")
    ckpts = instructions(jz, "pbt-formula", "checkpoint")
    assert loads, "no exploit happened"
    assert ckpts, "no donor was asked for a checkpoint"
    assert all(e["who"] == "pbt" for e in loads + ckpts)
    # every instruction is applied, except one that reached a trial which
    # had just finished its run
    def ok(e):
        return e["applied"] == 1 or any(w in (e["result"] or "") for w in ("ended", "closed"))
    assert all(ok(e) for e in loads + ckpts), [e for e in loads + ckpts if not ok(e)]
    assert sum(e["applied"] == 1 for e in loads) >= 1
    assert sum(e["applied"] == 1 for e in ckpts) >= 1

    # lineage: each load made a new generation with the donor as parent
    gens = jz.sql("SELECT DISTINCT trial_id, generation, parent FROM params WHERE generation >= 1")
    assert len(gens) == len(loads)
    donors = {(e["trial"], e["detail"]["from"]) for e in loads}
    for trial, gen, parent in gens:
        assert (trial, parent) in donors
    # the params of a generation are the ones sent with the load
    for e in loads:
        lr = e["detail"]["params"]["lr"]
        assert 1e-4 <= lr <= 10.0
        rows = jz.sql("SELECT value FROM params WHERE trial_id = ? AND name = 'lr' AND generation >= 1",
                      e["trial"])
        assert any(abs(float(v) - lr) <= 1e-9 * abs(lr) for (v,) in rows)

    # the receivers' scores jump to their donors': right after the load the
    # receiver reports the step after the donor's checkpoint with a score
    # at least the donor's score at that checkpoint
    jumped = 0
    for e in loads:
        if e["applied"] != 1:
            continue  # reached a trial that had just ended: nothing to continue
        path = e["detail"]["path"]
        ck_step = int(os.path.basename(path).split("-")[1].split(".")[0])
        # the donor's score at the checkpoint is the checkpoint's own: a donor
        # that had just loaded a checkpoint and saved it before its next step
        # never reported that step itself
        with open(path) as f:
            state = json.load(f)
        assert state["step"] == ck_step, (path, state)
        dscore = state["score"]
        before = jz.sql("SELECT value FROM metrics WHERE trial_id = ? AND name = 'score' AND time <= ? "
                        "ORDER BY time DESC LIMIT 1", e["trial"], e["time"])
        after = jz.sql("SELECT value FROM metrics WHERE trial_id = ? AND name = 'score' AND step = ? "
                       "AND time >= ?", e["trial"], ck_step + 1, e["time"])
        assert after, "receiver %d never continued from step %d" % (e["trial"], ck_step)
        assert max(v for (v,) in after) >= dscore - 1e-9
        if before and dscore > before[0][0]:
            jumped += 1
    assert jumped >= 1

    # trial show lists the parent of the trial's latest generation (a trial
    # can be loaded more than once, from different donors)
    tid = gens[0][0]
    (_, parent) = max((g, p) for (t, g, p) in gens if t == tid)
    show = json.loads(jz.run("trial", "show", str(tid), "--json", check=0).stdout)
    assert show.get("parent") == parent, show


def test_pb2_runs(jz):
    spec = formula_spec("pb2-formula", {"type": "pbt", "seed": 2, "interval": 8, "pb2": True})
    spec["trial"]["env"] = {"FORMULA_STEPS": "48", "FORMULA_STEP_S": "0.03"}
    p = jz.run("run", jz.write_spec(spec), timeout=90)
    assert p.returncode == 0, p.stderr
    loads = instructions(jz, "pb2-formula", "load")
    # a load that reaches a trial as it finishes is answered "closed"/"ended"
    assert loads and any(e["applied"] == 1 for e in loads)
    assert all(e["applied"] == 1 or any(w in (e["result"] or "") for w in ("ended", "closed"))
               for e in loads), loads
    assert any("pb2" in e["detail"]["reason"] for e in loads)


def test_guard_rolls_back_planted_spike(jz):
    # one trial at lr 0.5 that diverges (NaN) from step 20 on while lr > 0.3;
    # the guard checkpoints it every 5 steps and rolls back with lr halved
    spec = formula_spec("guard-formula", {"type": "random", "seed": 1}, trials=1, parallel=1,
                        guard={"checkpoint_every": 5},
                        lr={"type": "choice", "values": [0.5]})
    spec["trial"]["env"] = {"FORMULA_STEPS": "40", "FORMULA_STEP_S": "0.02",
                            "FORMULA_SPIKE_STEP": "20", "FORMULA_SPIKE_LR": "0.3"}
    spec["alerts"] = [{"on": "guard"}, {"on": "best_improved"}]
    p = jz.run("run", jz.write_spec(spec), timeout=90)
    assert p.returncode == 0, p.stderr
    ((tid, state),) = jz.sql("SELECT id, state FROM trials")
    assert state == "completed"
    # the rollback and the first result raised one alert each
    assert jz.sql("SELECT rule, trial_id FROM alerts ORDER BY id") == [
        ("study:guard#0", tid), ("study:best_improved#1", tid)]
    loads = instructions(jz, "guard-formula", "load")
    assert len(loads) == 1, loads
    e = loads[0]
    assert e["who"] == "guard" and e["applied"] == 1
    assert "nan" in e["detail"]["reason"] and "rollback 1/3" in e["detail"]["reason"]
    assert abs(e["detail"]["params"]["lr"] - 0.25) < 1e-9
    ck = instructions(jz, "guard-formula", "checkpoint")
    assert sum(c["applied"] == 1 for c in ck) >= 3
    assert all(c["applied"] == 1 or any(w in (c["result"] or "") for w in ("ended", "closed"))
               for c in ck)
    rows = jz.sql("SELECT generation, value FROM params WHERE trial_id = ? AND name = 'lr' "
                  "ORDER BY generation", tid)
    assert [g for g, _ in rows] == [0, 1]
    assert abs(float(rows[1][1]) - 0.25) < 1e-9
    # after the rollback the losses are finite again to the end
    (last,) = jz.sql("SELECT value FROM metrics WHERE trial_id = ? AND name = 'train_loss' "
                     "ORDER BY time DESC LIMIT 1", tid)[0]
    assert last is not None and last < 1


def test_guard_stops_a_trial_without_checkpoint(jz):
    spec = formula_spec("guard-stop", {"type": "random", "seed": 1}, trials=1, parallel=1,
                        guard={"jump": 3}, lr={"type": "choice", "values": [0.5]})
    spec["trial"]["env"] = {"FORMULA_STEPS": "40", "FORMULA_STEP_S": "0.02",
                            "FORMULA_SPIKE_STEP": "10", "FORMULA_SPIKE_KIND": "spike"}
    spec["alerts"] = [{"on": "guard", "name": "div"}]
    jz.run("run", jz.write_spec(spec), timeout=90)  # exits 1: no trial completed
    ((state, reason),) = jz.sql("SELECT state, reason FROM trials")
    assert state == "pruned" and reason.startswith("diverged"), (state, reason)  # the guard: pruned
    al = json.loads(jz.run("alerts", "guard-stop", "--json", check=0).stdout)
    assert [(a["rule"], a["kind"]) for a in al] == [("study:div", "guard")]
    assert al[0]["detail"]["detail"]["action"] == "stop"
    assert al[0]["detail"]["text"].startswith("diverged")


def test_restart_fallback_for_a_program_that_does_not_poll(jz):
    # donors checkpoint on their own every 5 steps; nobody polls, so each
    # load times out and the trial is restarted from the checkpoint
    spec = formula_spec("pbt-nopoll", {"type": "pbt", "seed": 5, "interval": 10,
                                       "load_timeout_s": 2}, trials=2, parallel=2)
    spec["trial"]["env"] = {"FORMULA_STEPS": "80", "FORMULA_STEP_S": "0.05", "FORMULA_NOPOLL": "1",
                            "FORMULA_CKPT_EVERY": "5"}
    p = jz.run("run", jz.write_spec(spec), timeout=120)
    assert p.returncode == 0, p.stderr
    restarts = events(jz, "pbt-nopoll", "restart_from_checkpoint")
    assert restarts, [e["kind"] for e in events(jz, "pbt-nopoll")]
    for tid in {r["trial"] for r in restarts}:
        mine = [r for r in restarts if r["trial"] == tid]
        (attempt, state) = jz.sql("SELECT attempt, state FROM trials WHERE id = ?", tid)[0]
        assert attempt == len(mine) and state == "completed"
        # attempt k started from the k-th restart's checkpoint (the donor's
        # state): its first reported step is the one after it (an attempt
        # killed again before its first report has none)
        checked = 0
        for k, r in enumerate(mine, start=1):
            assert r["detail"]["path"].endswith(".json")
            assert "from" in r["detail"]
            ck_step = int(os.path.basename(r["detail"]["path"]).split("-")[1].split(".")[0])
            (first,) = jz.sql("SELECT min(step) FROM metrics WHERE trial_id = ? AND attempt = ?",
                              tid, k)[0]
            assert first is None or first == ck_step + 1
            checked += first is not None
        assert checked >= 1
    # the loads themselves were never acknowledged
    loads = instructions(jz, "pbt-nopoll", "load")
    assert len(loads) == len(restarts) and all(e["applied"] == 0 for e in loads)


@pytest.mark.skipif(not os.access(os.path.join(BUILD, "bin", "jizhi-train"), os.X_OK),
                    reason="jizhi-train not built")
def test_pbt_over_jizhi_train(jz):
    spec = {
        "name": "pbt-train",
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "pbt", "seed": 3, "interval": 60},
        "budget": {"trials": 2, "parallel": 2},
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 0.5, "log": True}},
        "trial": {"command": ["jizhi-train", "--dataset", "synthetic", "--synthetic-n", "6000",
                              "--val-size", "500", "--hidden", "512,512", "--epochs", "3",
                              "--batch-size", "64", "--eval-every", "30", "--threads", "1",
                              "--quiet"],
                  "timeout_s": 60, "retries": 0},
    }
    p = jz.run("run", jz.write_spec(spec), timeout=90)
    assert p.returncode == 0, p.stderr
    states = jz.sql("SELECT state FROM trials")
    assert all(s == "completed" for (s,) in states), states
    loads = instructions(jz, "pbt-train", "load")
    # every load is applied, except one that reached a trial which had just
    # finished its run (the helper answers "closed" / the controller "ended")
    def ok(e):
        return e["applied"] == 1 or any(w in (e["result"] or "") for w in ("ended", "closed"))
    assert loads and all(ok(e) for e in loads), [e for e in loads if not ok(e)]
    assert sum(e["applied"] == 1 for e in loads) >= 1
    assert jz.sql("SELECT count(*) FROM params WHERE generation >= 1 AND parent IS NOT NULL")[0][0] >= 1
