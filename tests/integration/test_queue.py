"""The queue: per-user quotas hold while 3 users submit at once (and after a
controller kill -9 and restart), fair share at equal priority, priorities
and `jizhi queue` explaining what waits, no preemption of a trial that
cannot checkpoint, and a preemption round trip (checkpoint, release,
resume from the checkpoint) that keeps every acknowledged metric."""
import json
import os
import signal
import threading

from conftest import PROGS, base_spec
from test_control import daemons
from test_recovery import start_controller, stop

ACTIVE = "('starting','running','paused')"


def gated(jz, name, owner, trials, parallel, gate="go", **extra):
    """A study whose trials wait for the file `gate` (or gate-TRIALID when
    gate ends with '-') before reporting score=1."""
    path = os.path.join(jz.dir, gate)
    cond = f'"{path}$JIZHI_TRIAL"' if gate.endswith("-") else f'"{path}"'
    spec = base_spec(name, ["sh", "-c",
                            f"while [ ! -e {cond} ]; do sleep 0.05; done; "
                            "jizhi report --step 1 score=1"],
                     trials=trials, parallel=parallel)
    spec["trial"]["timeout_s"] = 0
    spec["owner"] = owner
    spec.update(extra)
    return spec


def running_by_study(jz):
    return dict(jz.sql("SELECT s.name, COUNT(*) FROM trials t JOIN studies s ON "
                       f"s.id=t.study_id WHERE t.state IN {ACTIVE} GROUP BY s.name"))


def queue(jz):
    return json.loads(jz.run("queue", "--json", check=0).stdout)


def waiting(jz):
    return {w["study"]: w for w in queue(jz)["waiting"]}


def touch(jz, name):
    open(os.path.join(jz.dir, name), "w").close()


def test_quotas_hold_with_three_users_submitting_at_once(jz):
    ep, ctl, disp = daemons(jz, slots="6")
    ctl2 = None
    try:
        jz.run("quota", "set", "alice", "slots=1", check=0)
        p = jz.run("quota", "set", "bob", "slots=2", "gpus=none", check=0)
        assert "quota of bob: slots 2, gpus none" in p.stdout
        specs = {u: jz.write_spec(gated(jz, f"s-{u}", u, trials=3, parallel=3), f"{u}.json")
                 for u in ("alice", "bob", "carol")}
        results = {}

        def submit(u):
            results[u] = jz.run("study", "submit", specs[u])
        threads = [threading.Thread(target=submit, args=(u,)) for u in specs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.returncode == 0 for r in results.values()), results
        limits = {"s-alice": 1, "s-bob": 2, "s-carol": 3}
        seen = {k: 0 for k in limits}

        def sample():
            run = running_by_study(jz)
            for k, lim in limits.items():
                assert run.get(k, 0) <= lim, run
                seen[k] = max(seen[k], run.get(k, 0))
            return run

        jz.wait_for(lambda: sample() == limits, 60, "each user to run up to their quota")
        # the queue says why alice and bob wait; carol does not wait
        w = waiting(jz)
        assert "quota: user alice runs 1 of 1 slots" in w["s-alice"]["reason"], w
        assert "quota: user bob runs 2 of 2 slots" in w["s-bob"]["reason"], w
        assert w["s-alice"]["pending"] + w["s-alice"]["new"] == 2
        assert "s-carol" not in w
        users = {u["user"]: u for u in queue(jz)["users"]}
        assert (users["alice"]["slots"], users["alice"]["quota_slots"]) == (1, 1)
        assert (users["carol"]["slots"], users["carol"]["quota_slots"]) == (3, -1)
        text = jz.run("queue", check=0).stdout
        assert "s-alice" in text and "quota: user alice" in text and "1/1" in text
        # let them all run to the end; the quotas hold at every look
        touch(jz, "go")
        jz.wait_for(lambda: (sample() is not None and
                             [s for (s,) in jz.sql("SELECT state FROM studies")] ==
                             ["finished"] * 3), 120, "the studies to finish")
        assert seen == limits
        assert jz.sql("SELECT COUNT(*) FROM trials WHERE state='completed'")[0][0] == 9
        # persisted: a controller killed with -9 and started again keeps them
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=30)
        os.unlink(jz.db + ".endpoint")
        ctl2 = start_controller(jz, ep)
        ql = json.loads(jz.run("quota", "list", "--json", check=0).stdout)
        assert [(q["user"], q["slots"], q["gpus"]) for q in ql] == [("alice", 1, -1),
                                                                   ("bob", 2, -1)]
        jz.run("study", "submit", jz.write_spec(gated(jz, "s-alice2", "alice", trials=2,
                                                      parallel=2, gate="go2")), check=0)
        jz.wait_for(lambda: running_by_study(jz).get("s-alice2") == 1, 60, "alice's trial")
        assert "quota: user alice runs 1 of 1" in waiting(jz)["s-alice2"]["reason"]
        assert running_by_study(jz).get("s-alice2") == 1
        # bad input changes nothing
        for args in (["quota", "set", "alice"], ["quota", "set", "alice", "slots=-3"],
                     ["quota", "set", "alice", "cpus=2"], ["quota", "set", "a b", "slots=1"]):
            p = jz.run(*args)
            assert p.returncode in (1, 2) and p.stderr, args
        assert json.loads(jz.run("quota", "list", "--json", check=0).stdout) == ql
        touch(jz, "go2")
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='s-alice2'")[0][0]
                    == "finished", 60, "alice's second study")
    finally:
        stop(*(p for p in (ctl2, ctl, disp) if p))


def test_fair_share_gives_a_free_slot_to_the_user_with_fewest_running(jz):
    ep, ctl, disp = daemons(jz, slots="2")
    try:
        jz.run("study", "submit", jz.write_spec(gated(jz, "a", "alice", 4, 4, gate="go-"),
                                                "a.json"), check=0)
        jz.wait_for(lambda: running_by_study(jz).get("a") == 2, 60, "alice's two trials")
        jz.run("study", "submit", jz.write_spec(gated(jz, "b", "bob", 2, 2, gate="go-"),
                                                "b.json"), check=0)
        jz.wait_for(lambda: "b" in waiting(jz), 30, "bob's study to wait")
        w = waiting(jz)
        assert w["b"]["reason"].startswith("no capacity"), w
        assert w["a"]["reason"].startswith("no capacity"), w
        # one of alice's trials ends: the slot goes to bob (0 running), not
        # to alice's older study (1 running)
        (first,) = jz.sql("SELECT MIN(id) FROM trials WHERE state='running'")[0]
        touch(jz, f"go-{first}")
        jz.wait_for(lambda: running_by_study(jz).get("b") == 1, 60, "bob's first trial")
        assert running_by_study(jz) == {"a": 1, "b": 1}
        for i in range(20):
            touch(jz, f"go-{i}")
    finally:
        stop(ctl, disp)


def test_priority_order_and_no_preemption_without_a_checkpoint(jz):
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        jz.run("study", "submit", jz.write_spec(gated(jz, "n", "ann", 1, 1), "n.json"), check=0)
        jz.wait_for(lambda: running_by_study(jz).get("n") == 1, 60, "the normal study's trial")
        jz.run("study", "submit", jz.write_spec(gated(jz, "l", "lee", 1, 1, priority="low"),
                                                "l.json"), check=0)
        jz.wait_for(lambda: "l" in waiting(jz), 30, "the low study to wait")
        assert waiting(jz)["l"]["reason"] == "no capacity: no dispatcher has a free slot"
        # high priority from the command line; the normal trial never saved a
        # checkpoint, so it is not preempted: the high study waits
        jz.run("study", "submit", jz.write_spec(gated(jz, "h", "hal", 1, 1), "h.json"),
               "--priority", "high", check=0)
        jz.wait_for(lambda: "h" in waiting(jz), 30, "the high study to wait")
        w = waiting(jz)
        assert w["h"]["priority"] == "high" and w["h"]["reason"].startswith("no capacity"), w
        assert w["l"]["reason"] == "lower priority: study h (high) waits for capacity first"
        text = jz.run("queue", check=0).stdout
        assert "lower priority: study h" in text and "WAITS BECAUSE" in text
        assert jz.sql("SELECT t.state, t.preemptions FROM trials t JOIN studies s ON "
                      "s.id=t.study_id WHERE s.name='n'") == [("running", 0)]
        assert jz.sql("SELECT COUNT(*) FROM events WHERE kind='preempted'")[0][0] == 0
        # the slot frees: the high study runs before the older low one
        touch(jz, "go")
        jz.wait_for(lambda: [s for (s,) in jz.sql("SELECT state FROM studies")] ==
                    ["finished"] * 3, 90, "all three to finish")
        order = [n for (n,) in jz.sql("SELECT s.name FROM trials t JOIN studies s ON "
                                      "s.id=t.study_id ORDER BY t.started")]
        assert order == ["n", "h", "l"]
        p = jz.run("study", "submit", jz.write_spec(gated(jz, "x", "x", 1, 1), "x.json"),
                   "--priority", "urgent")
        assert p.returncode == 2 and "--priority" in p.stderr
    finally:
        stop(ctl, disp)


def test_preemption_round_trip_keeps_every_acknowledged_metric(jz):
    ack = os.path.join(jz.dir, "acked.log")
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        low = base_spec("low", ["python3", os.path.join(PROGS, "ckpt_trial.py")], trials=1,
                        parallel=1, env={"STEPS": "120", "CKPT_EVERY": "10",
                                         "STEP_SLEEP": "0.05", "ACK_LOG": ack})
        low["priority"] = "low"
        low["owner"] = "lee"
        jz.run("study", "submit", jz.write_spec(low, "low.json"), check=0)
        jz.wait_for(lambda: jz.sql("SELECT id FROM trials"), 30, "the low trial")
        ((tid,),) = jz.sql("SELECT id FROM trials")
        jz.wait_for(lambda: jz.sql("SELECT checkpoint_step FROM trials WHERE id=?",
                                   tid)[0][0] >= 20, 60, "two checkpoints")
        before = jz.sql("SELECT attempt, step, name, value FROM metrics WHERE trial_id=? "
                        "ORDER BY rowid", tid)
        high = gated(jz, "high", "hal", 1, 1, priority="high")
        jz.run("study", "submit", jz.write_spec(high, "high.json"), check=0)
        # checkpoint, exit, suspended; the high study's trial takes the slot
        jz.wait_for(lambda: running_by_study(jz).get("high") == 1, 60, "the high trial")
        (state, pre, ckpt_step, reason) = jz.sql(
            "SELECT state, preemptions, checkpoint_step, reason FROM trials WHERE id=?", tid)[0]
        assert (state, pre) == ("suspended", 1) and reason.startswith("preempted"), reason
        ev = [e for e in json.loads(jz.run("study", "events", "low", "--json", check=0).stdout)
              if e["kind"] == "preempted"]
        assert len(ev) == 1 and ev[0]["detail"]["for_study"] == "high"
        assert ev[0]["detail"]["how"] == "checkpoint"
        w = waiting(jz)
        assert w["low"]["preempted"] == 1 and w["low"]["reason"].startswith("no capacity")
        listing = jz.run("trial", "list", "low", check=0).stdout.splitlines()
        assert listing[0].split()[:5] == ["ID", "STATE", "TRY", "PRE", "STEP"]
        assert listing[1].split()[1:4] == ["suspended", "1", "1"]  # try 1, preempted once
        assert json.loads(jz.run("trial", "show", str(tid), "--json",
                                 check=0).stdout)["preemptions"] == 1
        # a controller killed with -9 now and started again still knows the
        # trial waits to be resumed
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=30)
        os.unlink(jz.db + ".endpoint")
        ctl = start_controller(jz, ep)
        jz.wait_for(lambda: "low" in waiting(jz), 30, "the low study to wait again")
        assert waiting(jz)["low"]["preempted"] == 1
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid) == [("suspended",)]
        # capacity frees: the low trial resumes from its checkpoint, to the end
        touch(jz, "go")
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='low'")[0][0] ==
                    "finished", 90, "the low study to finish")
        (state, attempt, value, pre) = jz.sql(
            "SELECT state, attempt, value, preemptions FROM trials WHERE id=?", tid)[0]
        assert (state, attempt, value, pre) == ("completed", 1, 120.0, 1)
        after = jz.sql("SELECT attempt, step, name, value FROM metrics WHERE trial_id=? "
                       "ORDER BY rowid", tid)
        # every point stored before the preemption is still there, unchanged
        assert after[:len(before)] == before
        # every acknowledged point is stored
        with open(ack) as f:
            acked = {int(l.split()[1]) for l in f if l.split()[0] == str(tid)}
        stored = {s for (a, s, n, v) in after if n == "score"}
        assert acked and acked <= stored
        # the second attempt went on from the checkpoint, not from step 1
        (first,) = jz.sql("SELECT MIN(step) FROM metrics WHERE trial_id=? AND attempt=1",
                          tid)[0]
        assert first == ckpt_step + 1
        assert stored == set(range(1, 121))
    finally:
        stop(ctl, disp)


def test_preemptible_restart_kills_and_reruns_a_trial_without_checkpoint(jz):
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        jz.run("study", "submit", jz.write_spec(
            gated(jz, "low", "lee", 1, 1, priority="low", preemptible="restart"), "l.json"),
            check=0)
        jz.wait_for(lambda: running_by_study(jz).get("low") == 1, 60, "the low trial")
        jz.run("study", "submit", jz.write_spec(gated(jz, "high", "hal", 1, 1, priority="high"),
                                                "h.json"), check=0)
        jz.wait_for(lambda: running_by_study(jz).get("high") == 1, 60, "the high trial")
        assert jz.sql("SELECT t.state, t.preemptions, t.attempt FROM trials t JOIN studies s "
                      "ON s.id=t.study_id WHERE s.name='low'") == [("pending", 1, 1)]
        ev = [e for e in json.loads(jz.run("study", "events", "low", "--json", check=0).stdout)
              if e["kind"] == "preempted"]
        assert [e["detail"]["how"] for e in ev] == ["restart"]
        touch(jz, "go")
        jz.wait_for(lambda: [s for (s,) in jz.sql("SELECT state FROM studies")] ==
                    ["finished"] * 2, 60, "both to finish")
        assert jz.sql("SELECT t.state, t.preemptions FROM trials t JOIN studies s "
                      "ON s.id=t.study_id WHERE s.name='low'") == [("completed", 1)]
    finally:
        stop(ctl, disp)


def test_a_preempted_trial_that_does_not_checkpoint_is_restarted_from_its_last_one(jz):
    ack = os.path.join(jz.dir, "acked.log")
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        low = base_spec("low", ["python3", os.path.join(PROGS, "ckpt_trial.py")], trials=1,
                        parallel=1, env={"STEPS": "80", "CKPT_EVERY": "10", "CKPT_UNTIL": "20",
                                         "IGNORE_CHECKPOINT": "1", "STEP_SLEEP": "0.05",
                                         "ACK_LOG": ack})
        low["priority"] = "low"
        low["guard"] = {"load_timeout_s": 2}  # how long a trial has to answer
        jz.run("study", "submit", jz.write_spec(low, "low.json"), check=0)
        jz.wait_for(lambda: jz.sql("SELECT checkpoint_step = 20 AND last_step > 25 FROM "
                                   "trials")[0][0] == 1, 60, "the last checkpoint")
        ((tid,),) = jz.sql("SELECT id FROM trials")
        jz.run("study", "submit", jz.write_spec(gated(jz, "high", "hal", 1, 1, priority="high"),
                                                "h.json"), check=0)
        jz.wait_for(lambda: running_by_study(jz).get("high") == 1, 60, "the high trial")
        kinds = [e["kind"] for e in json.loads(jz.run("study", "events", "low", "--json",
                                                      check=0).stdout)]
        assert "preempted" in kinds and "preemption_fallback" in kinds
        assert jz.sql("SELECT state, attempt, preemptions FROM trials WHERE id=?", tid) == [
            ("pending", 1, 1)]
        touch(jz, "go")
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='low'")[0][0] ==
                    "finished", 90, "the low study to finish")
        assert jz.sql("SELECT state, attempt FROM trials WHERE id=?", tid) == [("completed", 1)]
        (first,) = jz.sql("SELECT MIN(step) FROM metrics WHERE trial_id=? AND attempt=1",
                          tid)[0]
        assert first == 21
        with open(ack) as f:
            acked = {(int(l.split()[1])) for l in f}
        stored = {s for (s,) in jz.sql("SELECT step FROM metrics WHERE trial_id=? AND "
                                       "name='score'", tid)}
        assert acked <= stored and stored == set(range(1, 81))
    finally:
        stop(ctl, disp)


def test_only_an_admin_sets_quotas(jz):
    from test_auth import as_key, cli, curve_controller, free_port, keygen, write_keys
    keygen(jz, "controller")
    admin, user, viewer = (keygen(jz, n) for n in ("admin", "user", "viewer"))
    write_keys(jz, [f"{admin} root admin", f"{user} bob user", f"{viewer} vic viewer"])
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = curve_controller(jz, ep)
    try:
        p = cli(jz, as_key(jz, "user"), "quota", "set", "bob", "slots=100", "--controller", ep)
        assert p.returncode == 1 and "bob (role user) may not" in p.stderr, p.stderr
        assert jz.sql("SELECT COUNT(*) FROM quotas") == [(0,)]
        p = cli(jz, as_key(jz, "admin"), "quota", "set", "bob", "slots=1", "--controller", ep)
        assert p.returncode == 0 and "quota of bob: slots 1" in p.stdout, p.stderr
        assert jz.sql("SELECT user, slots, gpus FROM quotas") == [("bob", 1, -1)]
        p = cli(jz, as_key(jz, "viewer"), "queue", "--json", "--controller", ep)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["users"] == [
            {"user": "bob", "slots": 0, "gpus": 0, "quota_slots": 1, "quota_gpus": -1}]
        p = cli(jz, as_key(jz, "viewer"), "quota", "list", "--json", "--controller", ep)
        assert p.returncode == 0 and json.loads(p.stdout)[0]["user"] == "bob"
        # a user submits as themself only (the owner the quotas count for)
        p = cli(jz, as_key(jz, "user"), "study", "submit",
                jz.write_spec(gated(jz, "not-mine", "alice", 1, 1), "a.json"), "--controller", ep)
        assert p.returncode == 1 and 'bob may not submit a study owned by "alice"' in p.stderr, \
            p.stderr
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(0,)]
        p = cli(jz, as_key(jz, "user"), "study", "submit",
                jz.write_spec(gated(jz, "mine", "bob", 1, 1), "b.json"), "--controller", ep)
        assert p.returncode == 0, p.stderr
        p = cli(jz, as_key(jz, "admin"), "study", "submit",
                jz.write_spec(gated(jz, "for-alice", "alice", 1, 1), "c.json"), "--controller", ep)
        assert p.returncode == 0, p.stderr
        w = {x["study"]: x for x in json.loads(cli(jz, as_key(jz, "viewer"), "queue", "--json",
                                                   "--controller", ep).stdout)["waiting"]}
        assert (w["mine"]["owner"], w["for-alice"]["owner"]) == ("bob", "alice")
        assert w["mine"]["reason"].startswith("no capacity")
    finally:
        stop(ctl)


def test_a_study_no_machine_can_host_holds_back_nothing(jz):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = jz.popen("dispatcher", "--controller", ep, "--slots", "1", "--gpus", "none",
                    "--name", "m1", "--log-dir", os.path.join(jz.dir, "logs"))
    try:
        big = gated(jz, "big", "hal", 1, 1, priority="high")
        big["trial"]["gpus"] = 2
        jz.run("study", "submit", jz.write_spec(big, "big.json"), check=0)
        jz.run("study", "submit", jz.write_spec(gated(jz, "small", "lee", 1, 1, priority="low"),
                                                "small.json"), check=0)
        # the low study runs: no machine has the high study's GPUs
        jz.wait_for(lambda: running_by_study(jz).get("small") == 1, 60, "the low trial")
        w = waiting(jz)
        assert w["big"]["reason"] == ("no dispatcher can run it: a trial needs 1 slots and 2 "
                                      "GPUs on one machine"), w
        assert "small" not in w
        touch(jz, "go")
        jz.run("study", "stop", "big", check=0)
    finally:
        stop(ctl, disp)
