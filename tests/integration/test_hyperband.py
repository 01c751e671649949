"""Hyperband brackets and bo's partial results end to end. `jizhi run` with
early_stopping hyperband on the scripted trial (gns_trial.py: val_acc =
quality(x) * progress, one epoch per 50 steps, 8 epochs): with one trial
at a time the order of reports is fixed, so the test replays the rule in
Python (brackets in turn by smooth weighted round robin, ASHA per bracket)
and checks that exactly those trials were stopped, with those reasons.
Then bo with hyperband across a controller kill -9: the study finishes,
the monitor's bracket of every trial and bo's partial results (values at
epochs 1, 2, 4) are kept, and stopped trials are marked stopped in bo's
state, not finished."""
import json
import math
import os

from conftest import PROGS
from test_early_stopping import check_stops, points, quantile
from test_recovery import kill9_and_restart, start_controller, start_dispatcher, stop


def spec_for(name, es, trials, sched=None, parallel=1):
    return {
        "name": name,
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": sched or {"type": "random", "seed": 7},
        "early_stopping": es,
        "budget": {"trials": trials, "parallel": parallel},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {"command": ["python3", os.path.join(PROGS, "gns_trial.py")],
                  "timeout_s": 60, "retries": 0,
                  "env": {"STEPS": "400", "EPOCH_STEPS": "50", "N": "1600",
                          "SLEEP": "0.002"}},
    }


def brackets(grace, eta, rmax):
    """Grace of each bracket and Hyperband's trial counts n_b."""
    nb = 1
    while grace * eta ** nb <= rmax * (1 + 1e-9):
        nb += 1
    return [grace * eta ** b for b in range(nb)], \
        [math.ceil(nb / (nb - b) * eta ** (nb - 1 - b)) for b in range(nb)]


def assignments(weights, n):
    """The first n brackets handed out by smooth weighted round robin."""
    credit, out = [0.0] * len(weights), []
    for _ in range(n):
        for b, w in enumerate(weights):
            credit[b] += w
        pick = max(range(len(weights)), key=lambda b: (credit[b], -b))
        credit[pick] -= sum(weights)
        out.append(pick)
    return out


def hyperband_replay(jz, grace, eta, rmax):
    graces, weights = brackets(grace, eta, rmax)
    tids = [tid for (tid,) in jz.sql("SELECT id FROM trials ORDER BY number")]
    assign = dict(zip(tids, assignments(weights, len(tids))))
    recs, stops = {}, {}
    for tid in tids:
        b, k = assign[tid], 0
        for r, v in points(jz, tid):
            while graces[b] * eta ** k < rmax * (1 - 1e-9) and \
                    r >= graces[b] * eta ** k * (1 - 1e-9) and tid not in stops:
                rec = recs.setdefault((b, k), [])
                if rec:
                    cut = quantile(rec, 1 - 1 / eta)
                    if v < cut:
                        stops[tid] = ("hyperband: bracket %d rung %d (epoch %g): %.4g not in "
                                      "top 1/%g (cutoff %.4g)" % (b, k, graces[b] * eta ** k,
                                                                  v, eta, cut))
                rec.append(v)
                k += 1
            if tid in stops:
                break
    return stops, assign


def test_hyperband_stops_exactly_the_trials_the_rule_says(jz):
    es = {"type": "hyperband", "resource": "epoch", "max_resource": 8, "reduction": 2}
    p = jz.run("run", jz.write_spec(spec_for("hb", es, 12)), check=0)
    assert "12 trials" in p.stdout
    expected, assign = hyperband_replay(jz, 1, 2, 8)
    # brackets 0..3 (grace 1, 2, 4, 8); the last one never stops a trial
    assert set(assign.values()) == {0, 1, 2, 3}
    assert 2 <= len(expected) <= 9, expected
    assert all(assign[t] < 3 for t in expected)
    check_stops(jz, expected, "hyperband")
    # the monitor's saved brackets are the ones replayed
    (state,) = jz.sql("SELECT sched_state FROM studies")[0]
    mon = json.loads(state)["monitors"][0]
    assert mon["rule"] == "hyperband"
    assert {t["id"]: t["bracket"] for t in mon["trials"]} == assign


def test_bad_hyperband_specs_are_refused(jz):
    spec = spec_for("bad", {"type": "hyperband", "reduction": 3}, 2)
    p = jz.run("study", "submit", jz.write_spec(spec), "--db", jz.db)
    assert p.returncode == 1
    assert "early_stopping.max_resource: required for hyperband" in p.stderr
    spec = spec_for("bad", {"type": "hyperband", "max_resource": 9, "median": 1}, 2)
    p = jz.run("study", "submit", jz.write_spec(spec), "--db", jz.db)
    assert p.returncode == 1
    assert "early_stopping.median: unknown option for hyperband" in p.stderr
    spec = spec_for("bad", {"type": "hyperband", "max_resource": 9}, 2,
                    sched={"type": "bo", "fidelity": "some"})
    p = jz.run("study", "submit", jz.write_spec(spec), "--db", jz.db)
    assert p.returncode == 1
    assert 'scheduler.fidelity: must be "joint", "rungs" or "final"' in p.stderr
    # nothing was stored
    assert not os.path.exists(jz.db) or not jz.sql(
        "SELECT name FROM sqlite_master WHERE name='studies'") or \
        jz.sql("SELECT COUNT(*) FROM studies")[0][0] == 0


def test_bo_with_hyperband_survives_kill9(jz):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    es = {"type": "hyperband", "resource": "epoch", "max_resource": 8, "reduction": 2}
    spec = spec_for("bohb", es, 14, sched={"type": "bo", "seed": 2, "n_init": 4}, parallel=2)
    try:
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state IN "
                                   "('completed', 'pruned')")[0][0] >= 5, 120,
                    "five trials ended")
        ctl = kill9_and_restart(jz, ctl, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 180,
                    "the study to finish")
    finally:
        stop(ctl, disp)
    rows = jz.sql("SELECT id, state FROM trials ORDER BY number")
    assert len(rows) == 14 and all(s in ("completed", "pruned") for _, s in rows), rows
    stopped = {t for t, s in rows if s == "pruned"}  # a rule's stop: pruned
    assert stopped  # bracket 0 stops some
    (state,) = jz.sql("SELECT sched_state FROM studies")[0]
    st = json.loads(state)
    mon, bo = st["monitors"][0], st["main"]
    # every trial kept its bracket across the kill: the multiset is the
    # round robin's first 14
    _, weights = brackets(1, 2, 8)
    got = sorted(t["bracket"] for t in mon["trials"])
    assert got == sorted(assignments(weights, 14))
    # stops name the trial's own bracket
    by = {t["id"]: t["bracket"] for t in mon["trials"]}
    for tid, reason in jz.sql("SELECT id, reason FROM trials WHERE state='pruned'"):
        assert reason.startswith("hyperband: bracket %d " % by[tid]), reason
    # bo: every trial's values at epochs 1, 2, 4 (as far as it got), the
    # stopped ones marked stopped, none taken as finished
    part = {p["id"]: p["at"] for p in bo["partial"]}
    assert set(part) == {t for t, _ in rows}
    for tid, _ in rows:
        pts = points(jz, tid)
        for k, lev in enumerate([1, 2, 4]):
            reached = [v for r, v in pts if r >= lev]
            assert (part[tid][k] is None) == (not reached), (tid, k, part[tid])
            if reached:
                assert abs(part[tid][k] - reached[0]) < 1e-9
    assert {o["trial"] for o in bo["obs"] if o.get("stopped")} == stopped
    assert len(bo["obs"]) == 14
