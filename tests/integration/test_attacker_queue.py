"""Attacks on the queue, each from a separate client (issue 36, items 6
and 7), against a CURVE controller with an admin key (alice), a user key
(bob) and a dispatcher key, and over a shared ipc socket as another uid:

* a user asks for priority high (in the spec or with --priority): refused
  with the reason and how to get it, nothing stored; an admin's grant
  (`jizhi quota set bob max_priority=high`, persisted) or an admin's
  submit allows it, and taking the grant back refuses it again;
* after `study stop`, a trial that never reads its instructions is killed
  after the stop's grace, also by a controller restarted meanwhile;
* a user with a quota of 2 slots never holds more than 2 live processes
  across a stopped study (whose trials are still in their grace) and a
  running one."""
import json
import os
import signal

import pytest

from conftest import base_spec
from test_auth import (SharedSocket, as_key, cli, curve_controller, free_port, keygen,
                       write_keys)
from test_recovery import stop


class Site:
    """A CURVE controller on tcp://127.0.0.1 with keys for alice (admin),
    bob (user) and dispatcher m1, and, when `slots`, that dispatcher."""

    def __init__(self, jz, slots=None):
        self.jz = jz
        keygen(jz, "controller")
        keys = {n: keygen(jz, n) for n in ("alice", "bob", "d1")}
        write_keys(jz, [f"{keys['alice']} alice admin", f"{keys['bob']} bob user",
                        f"{keys['d1']} m1 dispatcher"])
        self.ep = f"tcp://127.0.0.1:{free_port()}"
        self.ctl = curve_controller(jz, self.ep)
        self.disp = None
        if slots:
            self.disp = jz.popen("dispatcher", "--controller", self.ep, "--name", "m1",
                                 "--key", os.path.join(jz.env["JIZHI_HOME"], "d1.key"),
                                 "--slots", str(slots),
                                 "--log-dir", os.path.join(jz.dir, "logs"))

    def as_user(self, who, *args):
        return cli(self.jz, as_key(self.jz, who), *args, "--controller", self.ep)

    def restart_controller(self):
        self.ctl.send_signal(signal.SIGKILL)
        self.ctl.wait(timeout=30)
        os.unlink(self.jz.db + ".endpoint")
        self.ctl = curve_controller(self.jz, self.ep)

    def stop(self):
        stop(*(p for p in (self.ctl, self.disp) if p))


def deaf_spec(jz, name, trials, parallel, **extra):
    """A study whose trials never speak nor read an instruction: each writes
    its pid to pid-NAME-TRIAL and sleeps (no timeout)."""
    pid = os.path.join(jz.dir, f"pid-{name}-")
    spec = base_spec(name, ["sh", "-c", f'f="{pid}$JIZHI_TRIAL"; echo $$ > "$f"; exec sleep 600'],
                     trials=trials, parallel=parallel)
    spec["trial"]["timeout_s"] = 0
    spec.update(extra)
    return spec


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie the dispatcher has not reaped yet is not a live process
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def live_pids(jz):
    """The pids of the trial processes still alive, by their pid files."""
    pids = []
    for n in os.listdir(jz.dir):
        if n.startswith("pid-"):
            try:
                pid = int(open(os.path.join(jz.dir, n)).read() or 0)
            except ValueError:
                continue
            if pid and alive(pid):
                pids.append(pid)
    return pids


def states(jz, study):
    return [s for (s,) in jz.sql("SELECT t.state FROM trials t JOIN studies s ON "
                                 "s.id=t.study_id WHERE s.name=? ORDER BY t.id", study)]


def active_trials(jz):
    return jz.sql("SELECT COUNT(*) FROM trials WHERE state IN "
                  "('starting','running','paused')")[0][0]


# ---- item 7: priority above normal is an admin's to grant ----

def test_a_user_cannot_submit_high_priority_unless_an_admin_grants_it(jz):
    site = Site(jz)
    try:
        high = jz.write_spec(dict(base_spec("b-high", ["true"]), priority="high"), "h.json")
        normal = jz.write_spec(base_spec("b-normal", ["true"]), "n.json")
        for args in (["study", "submit", high],
                     ["study", "submit", normal, "--priority", "high"]):
            p = site.as_user("bob", *args)
            assert p.returncode == 1, (args, p.stdout, p.stderr)
            assert "bob (role user) may submit at most priority normal, not high" in p.stderr
            assert "jizhi quota set bob max_priority=high" in p.stderr, p.stderr
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(0,)]
        assert jz.sql("SELECT COUNT(*) FROM events WHERE kind='study_submitted'") == [(0,)]
        # normal and low stay everyone's
        p = site.as_user("bob", "study", "submit", normal, "--priority", "low")
        assert p.returncode == 0, p.stderr
        # bob cannot grant it to himself; nothing is stored
        p = site.as_user("bob", "quota", "set", "bob", "max_priority=high")
        assert p.returncode == 1 and "bob (role user) may not administer" in p.stderr
        assert jz.sql("SELECT COUNT(*) FROM quotas") == [(0,)]
        # an admin may submit high for bob
        p = site.as_user("alice", "study", "submit",
                         jz.write_spec(dict(base_spec("a-high", ["true"]), priority="high",
                                            owner="bob"), "a.json"))
        assert p.returncode == 0, p.stderr
        # bad grants change nothing
        for bad in ("max_priority=urgent", "max_priority=low", "max_priority="):
            p = site.as_user("alice", "quota", "set", "bob", bad)
            assert p.returncode == 2 and "max_priority: expected normal or high" in p.stderr
        assert jz.sql("SELECT COUNT(*) FROM quotas") == [(0,)]
        # the admin's grant, persisted with the quota
        p = site.as_user("alice", "quota", "set", "bob", "max_priority=high")
        assert p.returncode == 0, p.stderr
        assert "quota of bob: slots none, gpus none, max priority high" in p.stdout
        assert jz.sql("SELECT user, slots, gpus, max_priority FROM quotas") == \
            [("bob", -1, -1, "high")]
        p = site.as_user("bob", "study", "submit", high)
        assert p.returncode == 0, p.stderr
        spec = json.loads(jz.sql("SELECT spec FROM studies WHERE name='b-high'")[0][0])
        assert spec["priority"] == "high" and spec["owner"] == "bob"
        listed = json.loads(site.as_user("bob", "quota", "list", "--json").stdout)
        assert listed == [{"user": "bob", "slots": -1, "gpus": -1, "max_priority": "high"}]
        # a slot limit set later keeps the grant; the grant survives a restart
        assert site.as_user("alice", "quota", "set", "bob", "slots=3").returncode == 0
        site.restart_controller()
        assert jz.sql("SELECT slots, max_priority FROM quotas") == [(3, "high")]
        again = jz.write_spec(dict(base_spec("b-high2", ["true"]), priority="high"), "h2.json")
        p = site.as_user("bob", "study", "submit", again)
        assert p.returncode == 0, p.stderr
        # taken back: refused again
        p = site.as_user("alice", "quota", "set", "bob", "max_priority=normal")
        assert p.returncode == 0 and "max priority normal" in p.stdout
        p = site.as_user("bob", "study", "submit", jz.write_spec(
            dict(base_spec("b-high3", ["true"]), priority="high"), "h3.json"))
        assert p.returncode == 1 and "may submit at most priority normal" in p.stderr
        assert jz.sql("SELECT COUNT(*) FROM studies WHERE name='b-high3'") == [(0,)]
    finally:
        site.stop()


def test_another_uid_on_a_shared_socket_cannot_submit_high_priority(jz):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    site = SharedSocket(jz)
    try:
        path = site.write_json("theirs.json",
                               dict(base_spec("theirs", ["true"]), priority="high"))
        p = site.as_nobody("study", "submit", path)
        assert p.returncode == 1, p.stderr
        assert "nobody (role user) may submit at most priority normal" in p.stderr
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(0,)]
        # the controller's own user is its admin: it may
        jz.run("study", "submit", path, "--controller", site.ep, check=0)
    finally:
        site.stop()


# ---- item 6: a stopped study's trials are killed after the grace and count ----

def test_study_stop_kills_a_trial_that_never_reads_its_instructions(jz):
    # its trials never read their stop: a 2 s kill grace instead of 10 s
    jz.env["JIZHI_STOP_GRACE_S"] = "2"
    site = Site(jz, slots=2)
    try:
        p = site.as_user("bob", "study", "submit",
                         jz.write_spec(deaf_spec(jz, "deaf", 1, 1)))
        assert p.returncode == 0, p.stderr
        jz.wait_for(lambda: states(jz, "deaf") == ["running"] and live_pids(jz), 60,
                    "the deaf trial running")
        (pid,) = live_pids(jz)
        assert site.as_user("bob", "study", "stop", "deaf").returncode == 0
        jz.wait_for(lambda: states(jz, "deaf") == ["stopped"], 60,
                    "the deaf trial to be killed after the stop's grace")
        assert not alive(pid)
        assert jz.sql("SELECT reason FROM trials") == [("study stopped",)]
        assert jz.sql("SELECT state FROM studies") == [("stopped",)]
    finally:
        site.stop()


def test_a_restarted_controller_still_stops_a_stopped_studys_live_trial(jz):
    site = Site(jz, slots=2)
    try:
        site.as_user("bob", "study", "submit", jz.write_spec(deaf_spec(jz, "deaf", 1, 1)))
        jz.wait_for(lambda: states(jz, "deaf") == ["running"] and live_pids(jz), 60,
                    "the deaf trial running")
        (pid,) = live_pids(jz)
        assert site.as_user("bob", "study", "stop", "deaf").returncode == 0
        # the controller dies within the grace; the one started again knows
        # the trial still runs, stops it and ends it in the store
        site.restart_controller()
        jz.wait_for(lambda: states(jz, "deaf") == ["stopped"], 60,
                    "the deaf trial to be stopped by the restarted controller")
        assert not alive(pid)
        # stopped by its study: resuming the study runs it again
        assert site.as_user("bob", "study", "resume", "deaf").returncode == 0
        jz.wait_for(lambda: states(jz, "deaf") == ["running"], 60, "the trial again")
    finally:
        site.stop()


def test_a_quota_counts_the_live_trials_of_stopped_studies(jz):
    # its trials never read their stop: a 2 s kill grace instead of 10 s
    jz.env["JIZHI_STOP_GRACE_S"] = "2"
    site = Site(jz, slots=6)
    try:
        assert site.as_user("alice", "quota", "set", "bob", "slots=2").returncode == 0
        p = site.as_user("bob", "study", "submit",
                         jz.write_spec(deaf_spec(jz, "s1", 2, 2), "s1.json"))
        assert p.returncode == 0, p.stderr
        jz.wait_for(lambda: states(jz, "s1") == ["running"] * 2 and len(live_pids(jz)) == 2,
                    60, "bob's first two trials")
        # stop s1 (its trials do not listen) and ask for two more at once
        assert site.as_user("bob", "study", "stop", "s1").returncode == 0
        p = site.as_user("bob", "study", "submit",
                         jz.write_spec(deaf_spec(jz, "s2", 2, 2), "s2.json"))
        assert p.returncode == 0, p.stderr
        most = [0, 0]

        def sample():
            live, active = len(live_pids(jz)), active_trials(jz)
            most[0], most[1] = max(most[0], live), max(most[1], active)
            assert live <= 2 and active <= 2, (live, active, states(jz, "s1"),
                                               states(jz, "s2"))
            return states(jz, "s2") == ["running"] * 2

        jz.wait_for(sample, 90, "bob's second study to run once the first's trials end")
        assert states(jz, "s1") == ["stopped"] * 2
        assert most == [2, 2]
        users = {u["user"]: u for u in json.loads(
            site.as_user("bob", "queue", "--json").stdout)["users"]}
        assert (users["bob"]["slots"], users["bob"]["quota_slots"]) == (2, 2)
        # resuming s1 does not get bob past the quota either
        assert site.as_user("bob", "study", "resume", "s1").returncode == 0

        def s1_waits():
            sample()
            w = {x["study"]: x for x in json.loads(
                site.as_user("bob", "queue", "--json").stdout)["waiting"]}
            return "quota: user bob runs 2 of 2 slots" in w.get("s1", {}).get("reason", "")

        jz.wait_for(s1_waits, 60, "s1 to wait for bob's quota")
        assert states(jz, "s1") == ["pending"] * 2
    finally:
        site.stop()
