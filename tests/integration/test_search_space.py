"""Search spaces through the daemons: conditional parameters absent from
JIZHI_PARAMS and placeholders filled with their defaults; const values;
`study enqueue` (checked against the space, run before the scheduler's
suggestions, kept across a controller kill -9); `study extend` running a
finished study again with more trials."""
import json
import os
import signal

from conftest import PROGS, base_spec
from test_recovery import start_controller, start_dispatcher, stop


def daemons(jz, slots="2"):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep, slots)
    return ep, ctl, disp


def cond_spec(name, trials, sleep="0"):
    log = "params.log"
    spec = base_spec(name, ["python3", os.path.join(PROGS, "params_trial.py"),
                            "--opt={opt}", "--m={m:none}", "--depth={depth}"],
                     trials=trials, parallel=1, env={"TRIAL_SLEEP": sleep, "PARAMS_LOG": log})
    spec["space"] = {
        "opt": {"type": "choice", "values": ["sgd", "adam"]},
        "x": {"type": "float", "low": 0.0, "high": 1.0},
        "m": {"type": "float", "low": 0.0, "high": 0.9, "when": {"opt": ["sgd"]}},
        "depth": {"type": "const", "value": 3},
    }
    return spec


def logged(jz):
    out = []
    for root, _, files in os.walk(jz.dir):
        for f in files:
            if f == "params.log":
                with open(os.path.join(root, f)) as fh:
                    out += [json.loads(line) for line in fh if line.strip()]
    return out


def done(jz, name):
    return jz.sql("SELECT COUNT(*) FROM trials t JOIN studies s ON t.study_id=s.id "
                  "WHERE s.name=? AND t.state IN ('completed','failed')", name)[0][0]


def test_conditional_params_const_and_placeholder_defaults(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(cond_spec("cond", 8)), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 90,
                    "the study to finish")
        rows = logged(jz)
        assert len(rows) == 8
        for r in rows:
            p = r["params"]
            assert p["depth"] == 3
            assert ("m" in p) == (p["opt"] == "sgd"), p
            assert r["argv"][0] == "--opt=" + p["opt"]
            assert r["argv"][1] == ("--m=none" if p["opt"] == "adam" else "--m=%s" % r["argv"][1][4:])
            assert r["argv"][2] == "--depth=3"
        assert {r["params"]["opt"] for r in rows} == {"sgd", "adam"}
        # the stored params have no inactive parameter either
        for (tid,) in jz.sql("SELECT id FROM trials"):
            names = {n for (n,) in jz.sql("SELECT name FROM params WHERE trial_id=?", tid)}
            assert "m" not in names or "sgd" in str(jz.sql(
                "SELECT value FROM params WHERE trial_id=? AND name='opt'", tid))
    finally:
        stop(ctl, disp)


def test_enqueue_runs_next_survives_kill9_and_extend_reruns(jz):
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        jz.run("study", "submit", jz.write_spec(cond_spec("q", 3, sleep="0.5")), check=0)
        # refusals name the parameter and change nothing
        p = jz.run("study", "enqueue", "q", "opt=adam", "x=0.5", "m=0.1")
        assert p.returncode == 1 and "params.m: is inactive" in p.stderr
        p = jz.run("study", "enqueue", "q", "opt=adam", "x=2")
        assert p.returncode == 1 and "params.x: must be a number from 0 to 1" in p.stderr
        p = jz.run("study", "enqueue", "q", "opt=sgd", "x=0.5")
        assert p.returncode == 1 and "params.m: missing" in p.stderr
        p = jz.run("study", "enqueue", "q", "opt=adam", "x=0.5", "colour=3")
        assert p.returncode == 1 and "params.colour: names no parameter" in p.stderr
        p = jz.run("study", "enqueue", "nope", "opt=adam", "x=0.5")
        assert p.returncode == 1 and "nope" in p.stderr
        p = jz.run("study", "enqueue", "q", "opt")
        assert p.returncode == 2 and "PARAM=VALUE" in p.stderr
        assert jz.sql("SELECT COUNT(*) FROM enqueued")[0][0] == 0
        # two queued configurations survive a kill -9 of the controller
        jz.run("study", "enqueue", "q", "opt=adam", "x=0.123", check=0)
        jz.run("study", "enqueue", "q", "opt=sgd", "x=0.456", "m=0.5", check=0)
        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
        ctl = start_controller(jz, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 90,
                    "the study to finish")
        xs = [r["params"]["x"] for r in logged(jz)]
        assert 0.123 in xs and 0.456 in xs and len(xs) == 3
        # they ran before the scheduler's later suggestions: trial numbers 0..2 hold them
        assert jz.sql("SELECT COUNT(*) FROM enqueued")[0][0] == 0
        ev = json.loads(jz.run("study", "events", "q", "--json", check=0).stdout)
        assert sum(e["kind"] == "trial_enqueued" for e in ev) == 2
        # extend: the finished study runs 2 more trials, an enqueued one first
        p = jz.run("study", "extend", "q")
        assert p.returncode == 2 and "--trials" in p.stderr
        p = jz.run("study", "extend", "q", "--trials", "0")
        assert p.returncode == 2 and "--trials" in p.stderr
        jz.run("study", "enqueue", "q", "opt=adam", "x=0.777", check=0)
        p = jz.run("study", "extend", "q", "--trials", "2", check=0)
        assert "5 trials in all (running)" in p.stdout
        jz.wait_for(lambda: done(jz, "q") == 5, 90, "the two new trials")
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 30,
                    "the study to finish again")
        assert 0.777 in [r["params"]["x"] for r in logged(jz)]
        (extra,) = jz.sql("SELECT extra_trials FROM studies")[0]
        assert extra == 2
        show = json.loads(jz.run("study", "list", "--json", check=0).stdout)
        assert show[0]["budget"] == 5
    finally:
        stop(ctl, disp)


def test_warm_start_feeds_bo_the_compatible_trials(jz):
    ep, ctl, disp = daemons(jz)
    try:
        old = cond_spec("old", 6)
        jz.run("study", "submit", jz.write_spec(old, "old.json"), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='old'")[0][0]
                    == "finished", 90, "the first study")
        new = cond_spec("new", 2)
        new["scheduler"] = {"type": "bo", "seed": 1, "n_init": 4}
        new["warm_start"] = {"from": ["nope"]}
        p = jz.run("study", "submit", jz.write_spec(new, "new.json"))
        assert p.returncode == 1 and 'warm_start.from[0]: no study named "nope"' in p.stderr
        new["warm_start"] = {"from": ["new"]}
        p = jz.run("study", "submit", jz.write_spec(new, "new.json"))
        assert p.returncode == 1 and "cannot warm-start from itself" in p.stderr
        new["warm_start"] = {"from": ["old"]}
        jz.run("study", "submit", jz.write_spec(new, "new.json"), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='new'")[0][0]
                    == "finished", 90, "the second study")
        (state,) = jz.sql("SELECT sched_state FROM studies WHERE name='new'")[0]
        obs = json.loads(state)["main"]["obs"]
        warm = [o for o in obs if o["trial"] < 0]
        assert len(warm) == 6 and len(obs) == 8
        old_params = [json.loads(r["params"]) if isinstance(r.get("params"), str) else r["params"]
                      for r in json.loads(jz.run("study", "export", "old", "--format", "json",
                                                 check=0).stdout)]
        assert sorted(json.dumps(o["params"], sort_keys=True) for o in warm) == \
            sorted(json.dumps(p, sort_keys=True) for p in old_params)
        ev = json.loads(jz.run("study", "events", "new", "--json", check=0).stdout)
        (w,) = [e for e in ev if e["kind"] == "warm_start"]
        assert w["detail"] == {"from": "old", "used": 6, "skipped": 0}
        # a study named twice would be fed twice: refused, naming the field
        rnd = cond_spec("rnd", 1)
        rnd["scheduler"] = {"type": "random", "seed": 1}
        rnd["warm_start"] = {"from": ["old", "new", "old"]}
        p = jz.run("study", "submit", jz.write_spec(rnd, "rnd.json"))
        assert p.returncode == 1, p.stderr
        assert 'warm_start.from[2]: "old" is named twice' in p.stderr
        assert jz.sql("SELECT COUNT(*) FROM studies WHERE name='rnd'") == [(0,)]
        # random learns nothing from them: its event says so
        rnd["warm_start"] = {"from": ["old"]}
        jz.run("study", "submit", jz.write_spec(rnd, "rnd.json"), check=0)
        ev = json.loads(jz.run("study", "events", "rnd", "--json", check=0).stdout)
        (w,) = [e for e in ev if e["kind"] == "warm_start"]
        assert w["detail"] == {"from": "old", "used": 0, "skipped": 0, "reason":
                               "the random scheduler learns nothing from finished trials"}
    finally:
        stop(ctl, disp)
