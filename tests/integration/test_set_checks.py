"""Honest answers when a person steers a trial (issue 39, items 1-3 and
the one-generation batch of item 9): `trial set` refuses a value of the
wrong type for a tuned parameter and one outside the space (unless
--force / "force": true) before anything is recorded, through the CLI and
the web API; a batch of values is one params generation; `trial pause
--release` waits for the outcome (released, or refused with the program's
reason and exit 1); a trial that never polls is reported as such, not as a
controller that does not answer."""
import json
import os

from conftest import PROGS, base_spec
from test_recovery import start_controller, start_dispatcher, stop
from webutil import daemons_with_web, http, make_token


def set_spec(name, **env):
    spec = base_spec(name, ["python3", os.path.join(PROGS, "set_trial.py")], trials=1,
                     parallel=1, env={k: str(v) for k, v in env.items()})
    spec["space"] = {
        "lr": {"type": "float", "low": 0.001, "high": 1.0, "log": True},
        "batch_size": {"type": "int", "low": 16, "high": 64},
        "optimizer": {"type": "choice", "values": ["sgd", "adam"]},
    }
    return spec


def daemons(jz, slots=1):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    return ep, ctl, start_dispatcher(jz, ep, slots)


def running_trial(jz):
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0, 60, "a reporting trial")
    return jz.sql("SELECT id FROM trials WHERE state='running' ORDER BY id")[0][0]


def recorded(jz, tid):
    """What a refused set must not change."""
    return (jz.sql("SELECT COUNT(*) FROM events"),
            jz.sql("SELECT generation FROM trials WHERE id=?", tid),
            jz.sql("SELECT generation, name, value FROM params WHERE trial_id=? ORDER BY 1, 2",
                   tid))


def test_trial_set_checks_values_against_the_space(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(set_spec("checks")), check=0)
        tid = running_trial(jz)
        before = recorded(jz, tid)
        # the wrong type for a tuned parameter: refused whatever --force says
        for arg, want in (("lr=abc", 'lr: expected a number from 0.001 to 1, log scale'),
                          ("lr=nan", "lr: expected a number"),
                          ("batch_size=40.5", "batch_size: expected a whole number from 16"),
                          ("optimizer=5", 'optimizer: expected one of ["sgd","adam"]')):
            for force in ([], ["--force"]):
                p = jz.run("trial", "set", str(tid), arg, *force)
                assert p.returncode == 1, (arg, p.stdout, p.stderr)
                assert want in p.stderr and "nothing was sent" in p.stderr, p.stderr
                assert "acknowledged" not in p.stdout
        # outside the space: refused without --force, naming the space and the way out
        for arg in ("lr=-5", "lr=1000", "batch_size=65", "optimizer=rmsprop"):
            p = jz.run("trial", "set", str(tid), arg)
            assert p.returncode == 1, (arg, p.stdout, p.stderr)
            assert "is outside the space" in p.stderr and "--force" in p.stderr, p.stderr
        # one bad value of several: none is sent
        p = jz.run("trial", "set", str(tid), "lr=0.5", "batch_size=big")
        assert p.returncode == 1 and "batch_size: expected a whole number" in p.stderr
        assert recorded(jz, tid) == before
        # legal values go through as one batch: one new generation, typed values
        p = jz.run("trial", "set", str(tid), "lr=0.5", "batch_size=32", "optimizer=adam",
                   check=0)
        assert "acknowledged" in p.stdout
        assert jz.sql("SELECT generation FROM trials WHERE id=?", tid) == [(1,)]
        gen1 = dict(jz.sql("SELECT name, value FROM params WHERE trial_id=? AND generation=1",
                           tid))
        assert gen1 == {"lr": "0.5", "batch_size": "32", "optimizer": '"adam"'}, gen1
        # a whole number for a float is a float; 48.0 for an int is 48
        jz.run("trial", "set", str(tid), "lr=1", "batch_size=48.0", check=0)
        gen2 = dict(jz.sql("SELECT name, value FROM params WHERE trial_id=? AND generation=2",
                           tid))
        assert gen2["lr"] == "1.0" and gen2["batch_size"] == "48", gen2
        # --force sends a value outside the space, as a number
        p = jz.run("trial", "set", str(tid), "lr=1000", "--force", check=0)
        assert "acknowledged" in p.stdout
        assert jz.sql("SELECT value FROM params WHERE trial_id=? AND generation=3 AND "
                      "name='lr'", tid) == [("1000.0",)]
        # a name outside the space goes as given; the program's ack decides
        p = jz.run("trial", "set", str(tid), "colour=5")
        assert p.returncode == 1 and "unknown parameter colour" in p.stderr
        # a batch the program refuses part of says which part
        p = jz.run("trial", "set", str(tid), "lr=0.25", "colour=blue")
        assert p.returncode == 1
        assert "refused colour (unknown parameter colour)" in p.stderr, p.stderr
        assert "applied the other values" in p.stderr
        # no stored value of a tuned parameter has the wrong type
        for (gen, name, value) in jz.sql("SELECT generation, name, value FROM params "
                                         "WHERE trial_id=?", tid):
            v = json.loads(value)
            if name == "lr":
                assert isinstance(v, float), (gen, value)
            elif name == "batch_size":
                assert isinstance(v, int), (gen, value)
        p = jz.run("trial", "stop", str(tid), "--force")
        assert p.returncode == 2 and "--force goes with `trial set` only" in p.stderr
        jz.run("trial", "stop", str(tid), check=0)
    finally:
        stop(ctl, disp)


def test_api_set_checks_values_and_takes_force(jz):
    ep, ctl, disp, url = daemons_with_web(jz, slots="1")
    tok = make_token(jz, "root", "admin")
    try:
        jz.run("study", "submit", jz.write_spec(set_spec("api")), check=0)
        tid = running_trial(jz)
        before = recorded(jz, tid)
        set_url = url + f"/api/trials/{tid}/set"
        st, j, _ = http("POST", set_url, {"values": {"lr": "abc"}, "force": True}, token=tok)
        assert st == 400 and j["error"] == "bad_value" and "lr: expected a number" in j["message"]
        st, j, _ = http("POST", set_url, {"values": {"lr": 1000}}, token=tok)
        assert st == 409 and j["error"] == "out_of_space", j
        assert "outside the space" in j["message"]
        st, j, _ = http("POST", set_url, {"values": {"lr": 1000}, "force": "yes"}, token=tok)
        assert st == 400 and j["error"] == "malformed" and "force" in j["message"], j
        assert recorded(jz, tid) == before
        st, j, _ = http("POST", set_url, {"values": {"lr": 1000}, "force": True}, token=tok)
        assert st == 200 and j["ack"]["latency_s"] >= 0, j
        # a text that reads as a number is taken as one
        st, j, _ = http("POST", set_url, {"values": {"lr": "0.5", "batch_size": "32"}},
                        token=tok)
        assert st == 200, j
        assert jz.sql("SELECT generation FROM trials WHERE id=?", tid) == [(2,)]
        assert dict(jz.sql("SELECT name, value FROM params WHERE trial_id=? AND generation=2",
                           tid)) == {"lr": "0.5", "batch_size": "32", "optimizer":
                                     jz.sql("SELECT value FROM params WHERE trial_id=? AND "
                                            "generation=0 AND name='optimizer'", tid)[0][0]}
        # pause --release of a program that cannot checkpoint: refused, with its reason
        st, j, _ = http("POST", url + f"/api/trials/{tid}/pause", {"release": True}, token=tok)
        assert st == 409 and j["error"] == "refused", j
        assert "the program wrote no checkpoint" in j["message"]
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid) == [("running",)]
        http("POST", url + f"/api/trials/{tid}/stop", token=tok)
    finally:
        stop(ctl, disp)


def test_pause_release_reports_refusal_and_keeps_the_trial_running(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(set_spec("norel")), check=0)
        tid = running_trial(jz)
        for _ in range(2):  # refused twice: the first refusal left nothing half done
            p = jz.run("trial", "pause", str(tid), "--release")
            assert p.returncode == 1, p.stdout + p.stderr
            assert "was not released: it refused to checkpoint (the program wrote no " \
                   "checkpoint); it keeps running and keeps its slot" in p.stderr, p.stderr
            assert "releas" not in p.stdout
            assert jz.sql("SELECT state FROM trials WHERE id=?", tid) == [("running",)]
        (s1,) = jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?", tid)[0]
        jz.wait_for(lambda: jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?", tid)[0][0]
                    > s1, 30, "the trial to go on")
        jz.run("trial", "stop", str(tid), check=0)
        jz.wait_trial_state(tid, "stopped", 30, "the trial to stop")
    finally:
        stop(ctl, disp)


def test_pause_release_waits_until_released(jz):
    ep, ctl, disp = daemons(jz)
    try:
        spec = set_spec("rel", CKPT=1)
        spec["budget"] = {"trials": 2, "parallel": 2}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running_trial(jz)
        p = jz.run("trial", "pause", str(tid), "--release", check=0)
        # when the command returns, the trial is suspended and its slot given on
        assert f"trial {tid}: released: it saved a checkpoint at step" in p.stdout, p.stdout
        (state, ckpt) = jz.sql("SELECT state, checkpoint FROM trials WHERE id=?", tid)[0]
        assert state == "suspended" and os.path.exists(ckpt)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE id<>? AND state="
                                   "'running'", tid)[0][0] == 1, 60, "the other trial to start")
        p = jz.run("study", "stop", "rel", check=0)
    finally:
        stop(ctl, disp)


def test_set_on_a_trial_that_never_polls_says_so(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(set_spec("deaf", NEVER_POLL=1)), check=0)
        tid = running_trial(jz)
        p = jz.run("trial", "set", str(tid), "lr=0.5", "--timeout", "2")
        assert p.returncode == 1, p.stdout + p.stderr
        err = p.stderr
        assert "is it running" not in err and "no answer from the controller" not in err, err
        assert f"trial {tid} has not acknowledged the set within 2 s (timed out)" in err, err
        assert "the controller forwarded it (instruction" in err, err
        assert "helper is connected (it last spoke at" in err, err
        assert "the program has not polled for instructions" in err, err
        # the change stays recorded and pending, and is not in the params
        ev = json.loads(jz.run("study", "events", "deaf", "--json", check=0).stdout)
        sets = [e for e in ev if e.get("kind") == "instruction"]
        assert len(sets) == 1 and sets[0]["applied"] is None
        assert jz.sql("SELECT generation FROM trials WHERE id=?", tid) == [(0,)]
        jz.run("trial", "stop", str(tid), check=0)
    finally:
        stop(ctl, disp)
