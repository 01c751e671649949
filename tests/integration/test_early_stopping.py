"""Early stopping end to end: `jizhi run` with ASHA and the median rule on
a scripted trial (gns_trial.py: val_acc = quality(x) * progress, one epoch
per 50 steps) and ASHA on jizhi-train with a tiny synthetic dataset. With
one trial at a time the order of reports is fixed, so each test replays
the rule in Python over the stored metrics and checks that exactly those
trials were stopped, with exactly those reasons."""
import json
import os
import re

import pytest

from conftest import PROGS


def spec_for(name, es, trials=9, **env):
    e = {"STEPS": "400", "EPOCH_STEPS": "50", "N": "1600", "SLEEP": "0.001"}
    e.update(env)
    return {
        "name": name,
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "random", "seed": 5},
        "early_stopping": es,
        "budget": {"trials": trials, "parallel": 1},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {"command": ["python3", os.path.join(PROGS, "gns_trial.py")],
                  "timeout_s": 60, "retries": 0, "env": e},
    }


def points(jz, tid):
    """(epoch, val_acc) pairs of a trial, in step order."""
    rows = jz.sql("SELECT step, name, value FROM metrics WHERE trial_id=? AND name IN "
                  "('epoch','val_acc') ORDER BY step, rowid", tid)
    by = {}
    for step, name, value in rows:
        by.setdefault(step, {})[name] = value
    return [(d["epoch"], d["val_acc"]) for _, d in sorted(by.items()) if len(d) == 2]


def quantile(vals, q):
    v = sorted(vals)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def asha_replay(jz, grace, eta, resource="epoch", mode="max", rungs=99):
    """Expected {trial id: reason} (the rule of schedulers/sched_es.c)."""
    recs, stops = {}, {}
    for (tid,) in jz.sql("SELECT id FROM trials ORDER BY number"):
        k = 0
        for r, v in points(jz, tid):
            while k < rungs and r >= grace * eta ** k * (1 - 1e-9) and tid not in stops:
                rec = recs.setdefault(k, [])
                if rec:
                    cut = quantile(rec, 1 - 1 / eta if mode == "max" else 1 / eta)
                    if (v < cut) if mode == "max" else (v > cut):
                        stops[tid] = "asha: rung %d (%s %g): %.4g not in top 1/%g (cutoff %.4g)" % (
                            k, resource, grace * eta ** k, v, eta, cut)
                rec.append(v)
                k += 1
            if tid in stops:
                break
    return stops


def check_stops(jz, expected, who):
    rows = jz.sql("SELECT id, state, reason FROM trials ORDER BY number")
    # a rule's stop ends a trial "pruned" (a person's stop: "stopped")
    got = {tid: reason for tid, state, reason in rows if state == "pruned"}
    assert got == expected
    others = [state for tid, state, _ in rows if tid not in expected]
    assert all(s == "completed" for s in others), rows
    # the stop instructions are events by the rule, with the same reasons
    ev = jz.sql("SELECT trial_id, detail FROM events WHERE kind='instruction' AND who=?", who)
    assert {t: json.loads(d)["reason"] for t, d in ev} == expected
    assert all(json.loads(d)["kind"] == "stop" for _, d in ev)


def test_asha_stops_exactly_the_trials_the_rule_says(jz):
    # FLUSH_EPOCH: each epoch's report is acknowledged before the next step,
    # and the controller sends a rule's stop before that acknowledgement
    spec = spec_for("asha", {"type": "asha", "resource": "epoch", "grace": 1, "reduction": 3},
                    FLUSH_EPOCH="1")
    p = jz.run("run", jz.write_spec(spec), check=0)
    assert "9 trials" in p.stdout
    expected = asha_replay(jz, 1, 3)
    assert 3 <= len(expected) <= 7  # the rule did something, and not to everyone
    check_stops(jz, expected, "asha")
    # so a stopped trial's last epoch is the rung it was stopped at, not one more
    for tid, reason in expected.items():
        rung = float(re.match(r"asha: rung \d+ \(epoch ([0-9.e+-]+)\)", reason).group(1))
        (last,) = jz.sql("SELECT MAX(value) FROM metrics WHERE trial_id=? AND name='epoch'", tid)[0]
        assert last == pytest.approx(rung), (tid, reason, last)


def test_asha_mode_min_with_max_resource(jz):
    # mode min turns the ranking round; max_resource 4: rungs at epochs 1 and 2 only
    spec = spec_for("asha-min", {"type": "asha", "grace": 1, "reduction": 2, "max_resource": 4},
                    trials=6)
    spec["objective"]["mode"] = "min"
    jz.run("run", jz.write_spec(spec), check=0)
    for r in asha_replay(jz, 1, 2, mode="min", rungs=2).values():
        assert r.startswith("asha: rung 0") or r.startswith("asha: rung 1")
    check_stops(jz, asha_replay(jz, 1, 2, mode="min", rungs=2), "asha")


def median_replay(jz, grace, min_trials):
    hist, stops = {}, {}
    for (tid,) in jz.sql("SELECT id FROM trials ORDER BY number"):
        best = None
        hist[tid] = []
        for r, v in points(jz, tid):
            hist[tid].append((r, v))
            best = v if best is None else max(best, v)
            if r < grace:
                continue
            avgs = []
            for o, h in hist.items():
                if o == tid or max(x for x, _ in h) < r * (1 - 1e-9):
                    continue
                vals = [y for x, y in h if x <= r * (1 + 1e-9)]
                if vals:
                    avgs.append(sum(vals) / len(vals))
            if len(avgs) >= min_trials:
                med = quantile(avgs, 0.5)
                if best < med:
                    stops[tid] = "median: epoch %g: best %.4g worse than median %.4g of %d trials" % (
                        r, best, med, len(avgs))
                    break
    return stops


def test_median_rule_stops_exactly_the_trials_the_rule_says(jz):
    spec = spec_for("median", {"type": "median", "grace": 1, "min_trials": 2}, trials=7)
    jz.run("run", jz.write_spec(spec), check=0)
    expected = median_replay(jz, 1, 2)
    assert 1 <= len(expected) <= 5
    check_stops(jz, expected, "median")


def test_asha_on_jizhi_train(jz):
    spec = {
        "name": "asha-train",
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "random", "seed": 2},
        "early_stopping": {"type": "asha", "grace": 1, "reduction": 2},
        "budget": {"trials": 5, "parallel": 1},
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 0.5, "log": True}},
        "trial": {"command": ["jizhi-train", "--dataset", "synthetic", "--synthetic-n", "1500",
                              "--val-size", "300", "--hidden", "16", "--epochs", "4",
                              "--batch-size", "64", "--threads", "1", "--quiet"],
                  "timeout_s": 60, "retries": 0},
    }
    p = jz.run("run", jz.write_spec(spec), check=0)
    assert "5 trials" in p.stdout
    expected = asha_replay(jz, 1, 2)
    check_stops(jz, expected, "asha")
    assert expected, "with lr over 3.7 decades some trial falls below its rung"


def test_asha_resumes_after_a_controller_kill(jz):
    """kill -9 of the controller mid-study: the restarted controller restores
    ASHA's state and finishes; every trial is judged once per rung it
    reached (none twice, none skipped), stops carry ASHA's reasons."""
    from test_recovery import kill9_and_restart, start_controller, start_dispatcher, stop

    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    ctl2 = None
    try:
        spec = spec_for("asha-restart", {"type": "asha", "grace": 1, "reduction": 3}, trials=8,
                        SLEEP="0.005")
        spec["budget"]["parallel"] = 2
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state IN "
                                   "('completed','pruned')")[0][0] >= 3, 90, "three trials done")
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0] > 0,
                    30, "a running trial")
        ctl2 = kill9_and_restart(jz, ctl, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish after the restart")
    finally:
        stop(*(p for p in (ctl, ctl2, disp) if p))
    rows = jz.sql("SELECT id, state, reason FROM trials ORDER BY number")
    assert len(rows) == 8 and all(s in ("completed", "pruned") for _, s, _ in rows), rows
    assert all(r.startswith("asha: rung") for _, s, r in rows if s == "pruned"), rows
    state = json.loads(jz.sql("SELECT sched_state FROM studies")[0][0])
    rungs = state["monitors"][0]["rungs"]
    for k, recs in enumerate(rungs):
        ids = [t for t, _ in recs]
        assert len(ids) == len(set(ids)), f"a trial judged twice at rung {k}"
    for tid, st, reason in rows:
        top = max((r for r, _ in points(jz, tid)), default=0)
        stopped_at = int(reason.split()[2]) if st == "pruned" else None
        for k, milestone in enumerate((1, 3)):
            judged = any(t == tid for t, _ in rungs[k]) if k < len(rungs) else False
            due = top >= milestone and (stopped_at is None or k <= stopped_at)
            assert judged == due, (tid, st, reason, k, top)
