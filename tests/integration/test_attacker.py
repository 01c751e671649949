"""The attacker suite, controller side (issue "Security, second round"):
each attack runs as a separate client over real ZeroMQ with CURVE (pyzmq
DEALER sockets with their own key pairs, or the jizhi CLI with a key) or as
another local uid, and each test asserts the refusal and that nothing
changed: no file created, no state moved, no event applied.

- a user (CURVE key, web token, another local uid) cannot submit an alert
  hook; an admin can, and its hook runs;
- a dispatcher speaks only for the trials it holds: another dispatcher key
  can neither end, re-run, point the logs of, nor keep alive its trials;
- a trial cannot acknowledge another trial's instruction;
- the web delegation (`who`/`as_role`) never grants a dispatcher's work;
- a group- or world-writable authorized_keys is refused;
- refusals of anonymous peers do not flood the log;
- a dispatcher name stays bound to its key after silence until an admin
  releases it.
The other attacks of the suite are in test_attacker_*.py."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import base_spec
from test_auth import (SharedSocket, as_key, cli, curve_controller, free_port, keygen, log_has,
                       write_keys)
from test_recovery import stop
from webutil import daemons_with_web, http, make_token

zmq = pytest.importorskip("zmq", reason="python3-zmq (scripts/install-deps.sh) is missing")


def read_pair(jz, name):
    """The public and secret z85 keys of NAME.key in the test's key dir."""
    pair = {}
    with open(os.path.join(jz.env["JIZHI_HOME"], name + ".key")) as f:
        for line in f:
            k, v = line.split()
            pair[k] = v.encode()
    return pair["public"], pair["secret"]


class Raw:
    """A hand-made client: a DEALER with key pair NAME (CURVE), sending any
    message the protocol names and reading the reply to it."""

    def __init__(self, jz, ep, name):
        pub, sec = read_pair(jz, name)
        spub, _ = read_pair(jz, "controller")
        self.s = zmq.Context.instance().socket(zmq.DEALER)
        self.s.linger = 0
        self.s.curve_publickey, self.s.curve_secretkey, self.s.curve_serverkey = pub, sec, spub
        self.s.connect(ep)
        self.req = 0

    def ask(self, msg, timeout=15):
        self.req += 1
        msg = dict(msg, req=self.req)
        self.s.send_multipart([b"", json.dumps(msg).encode()])
        end = time.time() + timeout
        while time.time() < end:
            if self.s.poll(200):
                r = json.loads(self.s.recv_multipart()[-1])
                if r.get("req") == self.req:
                    return r
        raise AssertionError(f"no reply to {msg['type']}")

    def close(self):
        self.s.close()


def cluster(jz, lost_timeout="20"):
    """Keys for an admin (alice), a user (bob), two dispatchers (m1, m2)
    and a stranger nobody listed; a CURVE controller on 127.0.0.1."""
    keygen(jz, "controller")
    keys = {n: keygen(jz, n) for n in ("alice", "bob", "d1", "d2", "stranger")}
    write_keys(jz, [f"{keys['alice']} alice admin", f"{keys['bob']} bob user",
                    f"{keys['d1']} m1 dispatcher", f"{keys['d2']} m2 dispatcher"])
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = jz.popen("controller", "--db", jz.db, "--bind", ep, "--lost-timeout", lost_timeout,
                   "--log", os.path.join(jz.dir, "controller.log"))
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
    return ep, ctl


def hook_spec(name, marker):
    spec = base_spec(name, ["false"], trials=1, parallel=1)
    spec["alerts"] = [{"on": "trial_failed",
                       "hook": ["/bin/sh", "-c", f"id > {marker}"]}]
    return spec


def test_only_an_admin_may_submit_an_alert_hook(jz):
    ep, ctl = cluster(jz)
    procs = [ctl]
    home = jz.env["JIZHI_HOME"]
    marker = os.path.join(jz.dir, "pwned")
    try:
        procs.append(jz.popen("dispatcher", "--controller", ep, "--name", "m1", "--key",
                              os.path.join(home, "d1.key"), "--slots", "1",
                              "--log-dir", os.path.join(jz.dir, "logs")))
        # a user key: refused at submit with the reason, nothing stored
        p = cli(jz, as_key(jz, "bob"), "study", "submit",
                jz.write_spec(hook_spec("evil", marker)), "--controller", ep)
        assert p.returncode == 1, p.stderr
        assert "alerts[0].hook: bob (role user) may not submit an alert hook" in p.stderr
        assert jz.sql("SELECT count(*) FROM studies") == [(0,)]
        # the same rule without its hook is the user's to have
        spec = hook_spec("fine", marker)
        del spec["alerts"][0]["hook"]
        p = cli(jz, as_key(jz, "bob"), "study", "submit", jz.write_spec(spec, "f.json"),
                "--controller", ep)
        assert p.returncode == 0, p.stderr
        # an admin's hook runs when its alert fires
        p = cli(jz, as_key(jz, "alice"), "study", "submit",
                jz.write_spec(hook_spec("ops", marker), "o.json"), "--controller", ep)
        assert p.returncode == 0, p.stderr
        jz.wait_for(lambda: os.path.exists(marker) and os.path.getsize(marker) > 0, 60,
                    "the admin's hook")
        assert "uid=" in open(marker).read()
        assert jz.sql("SELECT name FROM studies ORDER BY name") == [("fine",), ("ops",)]
    finally:
        stop(*procs)


def test_a_web_user_token_cannot_submit_a_hook(jz):
    ep, ctl, disp, url = daemons_with_web(jz)
    marker = os.path.join(jz.dir, "pwned")
    try:
        st, j, _ = http("POST", url + "/api/studies", hook_spec("evil", marker),
                        token=make_token(jz, "bob"))
        assert st == 403 and j["error"] == "forbidden", j
        assert "bob (role user) may not submit an alert hook" in j["message"], j
        assert jz.sql("SELECT count(*) FROM studies") == [(0,)]
        st, j, _ = http("POST", url + "/api/studies", hook_spec("ops", marker),
                        token=make_token(jz, "root2", role="admin"))
        assert st == 200, j
        jz.wait_for(lambda: os.path.exists(marker), 60, "the admin's hook")
    finally:
        stop(ctl, disp)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
def test_another_local_uid_cannot_submit_a_hook(jz):
    site = SharedSocket(jz)
    marker = os.path.join(site.dir, "pwned")
    try:
        p = site.as_nobody("study", "submit", site.write_json("evil.json",
                                                              hook_spec("evil", marker)))
        assert p.returncode == 1, p.stderr
        assert "nobody (role user) may not submit an alert hook" in p.stderr
        assert jz.sql("SELECT count(*) FROM studies") == [(0,)]
        assert not os.path.exists(marker)
    finally:
        site.stop()


def trial_rows(jz):
    return jz.sql("SELECT id, state, attempt, dispatcher, out_path, token FROM trials "
                  "ORDER BY id")


def test_a_dispatcher_speaks_only_for_the_trials_it_holds(jz):
    ep, ctl = cluster(jz, lost_timeout="3")
    home = jz.env["JIZHI_HOME"]
    m1 = jz.popen("dispatcher", "--controller", ep, "--name", "m1", "--key",
                  os.path.join(home, "d1.key"), "--slots", "2",
                  "--log-dir", os.path.join(jz.dir, "logs"))
    procs = [ctl, m1]
    evil = Raw(jz, ep, "d2")
    try:
        spec = base_spec("s", ["sleep", "61.25"], trials=2, parallel=2)
        p = cli(jz, as_key(jz, "alice"), "study", "submit", jz.write_spec(spec),
                "--controller", ep)
        assert p.returncode == 0, p.stderr
        jz.wait_for(lambda: [r[1] for r in trial_rows(jz)] == ["running"] * 2 and
                    all(r[4] for r in trial_rows(jz)), 60, "both trials running on m1")
        # m2 registers honestly (no slots, so nothing is ever given to it)
        assert evil.ask({"type": "register", "name": "m2", "slots": 0, "gpus": [],
                         "running": []})["type"] == "ok"
        before = trial_rows(jz)
        (t1, _, a1, _, out1, tok1), (t2, _, a2, _, _, tok2) = before
        forged = [
            {"type": "started", "name": "m2", "trial": t1, "attempt": a1, "pid": 1,
             "stdout": "/etc/passwd", "stderr": "/etc/shadow", "gpus": []},
            {"type": "exited", "name": "m2", "trial": t1, "attempt": a1, "how": "exited",
             "code": 0, "signal": 0, "message": "", "stderr_tail": ""},
            {"type": "exited", "name": "m2", "trial": t2, "attempt": a2, "how": "lost",
             "code": -1, "signal": 0, "message": "", "stderr_tail": ""},
        ]
        for msg in forged:
            r = evil.ask(msg)
            assert r["type"] == "error" and r["code"] == "forbidden", (msg, r)
            assert "is not this dispatcher's" in r["message"]
        assert trial_rows(jz) == before
        log_has(jz, "refused started of trial")

        # a trial cannot acknowledge another trial's instruction
        p = cli(jz, as_key(jz, "alice"), "trial", "set", str(t2), "x=0.25", "--no-wait",
                "--controller", ep)
        assert p.returncode == 0, p.stderr
        (ins,) = jz.sql("SELECT id FROM events WHERE kind='instruction' AND trial_id=?", t2)[0]
        anon = Raw(jz, ep, "stranger")  # a trial speaks with its token, no listed key
        r = anon.ask({"type": "ins_ack", "trial": t1, "token": tok1, "id": ins,
                      "applied": True})
        anon.close()
        assert r["type"] == "error" and r["code"] == "forbidden", r
        assert jz.sql("SELECT applied FROM events WHERE id=?", ins) == [(None,)]

        # m1 goes silent: m2's heartbeats listing its trials do not keep them
        m1.send_signal(signal.SIGSTOP)
        listing = [{"trial": t, "attempt": a, "pid": 4242} for t, a in ((t1, a1), (t2, a2))]
        end = time.time() + 60
        while time.time() < end:
            r = evil.ask({"type": "disp_heartbeat", "name": "m2", "running": listing})
            assert r["type"] == "ok"
            if all(row[1] != "running" or row[2] != a for row, a in
                   zip(trial_rows(jz), (a1, a2))):
                break
            time.sleep(0.5)
        rows = trial_rows(jz)
        assert all(row[1] != "running" for row in rows), rows
        assert all(row[4] == out1 or row[0] != t1 for row in rows)
        log_has(jz, "dispatcher m2 lists trial")
    finally:
        evil.close()
        try:
            m1.send_signal(signal.SIGCONT)
        except ProcessLookupError:
            pass
        stop(*procs)
        subprocess.run(["pkill", "-f", "sleep 61.25"], check=False)


def test_web_delegation_never_grants_a_dispatchers_work(jz):
    ep, ctl = cluster(jz)
    admin = Raw(jz, ep, "alice")
    try:
        r = admin.ask({"type": "register", "name": "fake", "slots": 4, "gpus": [],
                       "running": [], "who": "web:x", "as_role": "dispatcher"})
        assert r["type"] == "error" and r["code"] == "forbidden", r
        assert "may not do a dispatcher's work" in r["message"]
        assert jz.sql("SELECT count(*) FROM dispatchers") == [(0,)]
        # a delegation to a web role still works: the event is the user's
        r = admin.ask({"type": "read", "what": "studies", "who": "web:vic",
                       "as_role": "viewer"})
        assert r["type"] == "ok", r
    finally:
        admin.close()
        stop(ctl)


def test_writable_authorized_keys_are_refused(jz):
    keygen(jz, "controller")
    alice = keygen(jz, "alice")
    path = write_keys(jz, [f"{alice} alice admin"])
    os.chmod(path, 0o666)
    ep = f"tcp://127.0.0.1:{free_port()}"
    p = jz.run("controller", "--db", jz.db, "--bind", ep, timeout=30)
    assert p.returncode == 1, p.stderr
    assert "authorized_keys: refused" in p.stderr and "chmod 600" in p.stderr, p.stderr
    assert not os.path.exists(jz.db + ".endpoint")
    os.chmod(path, 0o600)
    ctl = curve_controller(jz, ep)
    try:
        assert cli(jz, as_key(jz, "alice"), "study", "list", "--controller",
                   ep).returncode == 0
        # made writable and reloaded: refused, the old keys stay
        os.chmod(path, 0o620)
        ctl.send_signal(signal.SIGHUP)
        log_has(jz, "writable by no one else")
        assert cli(jz, as_key(jz, "alice"), "study", "list", "--controller",
                   ep).returncode == 0
    finally:
        stop(ctl)


def test_an_anonymous_flood_does_not_flood_the_log(jz):
    jz.env["JIZHI_REFUSAL_WINDOW_S"] = "4"  # the log's window: 4 s, not 10
    ep, ctl = cluster(jz)
    anon = Raw(jz, ep, "stranger")
    log = os.path.join(jz.dir, "controller.log")
    try:
        for _ in range(300):
            r = anon.ask({"type": "submit", "spec": {"name": "x"}})
            assert r["type"] == "error" and r["code"] == "unauthorized", r
        assert anon.ask({"type": "ping"})["type"] == "ok"
        refusals = open(log).read().count("refused submit from an unknown key")
        assert 1 <= refusals <= 20, refusals
        # the next window's first refusal says how many were not logged: an
        # event (the log line), asked for until it comes
        line = "more refusals in the last 4 s were not logged"

        def said():
            anon.ask({"type": "submit", "spec": {"name": "x"}})
            return line in open(log).read()

        jz.wait_for(said, 30, f"log line {line!r}")
        assert jz.sql("SELECT count(*) FROM studies") == [(0,)]
    finally:
        anon.close()
        stop(ctl)


def test_a_dispatcher_name_stays_bound_until_an_admin_releases_it(jz):
    ep, ctl = cluster(jz, lost_timeout="1")
    d1, d2 = Raw(jz, ep, "d1"), Raw(jz, ep, "d2")
    reg = {"type": "register", "name": "gpu-9", "slots": 1, "gpus": [], "running": []}
    try:
        assert d2.ask(reg)["type"] == "ok"
        # silent for past twice the lost timeout: forgotten, still bound
        for _ in range(10):
            time.sleep(3)  # a heartbeat would keep it: ask only now and then
            r = d2.ask({"type": "disp_heartbeat", "name": "gpu-9", "running": []})
            if r.get("code") == "unknown_dispatcher":
                break
        assert r.get("code") == "unknown_dispatcher", r
        r = d1.ask(reg)
        assert r["type"] == "error" and r["code"] == "forbidden", r
        # a user may not release it; the admin may
        p = cli(jz, as_key(jz, "bob"), "dispatcher", "release", "gpu-9", "--controller", ep)
        assert p.returncode == 1 and "may not administer" in p.stderr, p.stderr
        assert d1.ask(reg)["code"] == "forbidden"
        p = cli(jz, as_key(jz, "alice"), "dispatcher", "release", "gpu-9", "--controller",
                ep)
        assert p.returncode == 0 and "released" in p.stdout, p.stderr
        assert d1.ask(reg)["type"] == "ok"
        p = cli(jz, as_key(jz, "alice"), "dispatcher", "release", "nope", "--controller", ep)
        assert p.returncode == 1 and "no dispatcher name" in p.stderr, p.stderr
    finally:
        d1.close()
        d2.close()
        stop(ctl)
