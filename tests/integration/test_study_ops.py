"""Whole-study operations over real daemons (docs/cli.md, study delete and
copy): delete is refused while the study runs and to another user, then
removes the study, its trials, params, metrics, events and enqueued
configurations from the store and frees the name for a fixed spec; copy
starts a new study from a stored spec; the API does the same with the
same rules. A trial run again by `study resume` shows nothing of its
stopped attempt; a resume that cannot start says that it waits and why;
`watch` fits an 80-column terminal."""
import json
import os
import re
import subprocess

from conftest import JIZHI, PROGS, base_spec
from test_auth import as_key, cli, curve_controller, free_port, keygen, write_keys
from test_control import daemons, live_spec, running_trial
from test_recovery import stop
from test_watch import Tmux


def rows_of(jz, study_id, trial_ids):
    """What the store holds of a study, by table."""
    marks = ",".join("?" * len(trial_ids)) or "NULL"
    return {
        "studies": jz.sql("SELECT COUNT(*) FROM studies WHERE id=?", study_id)[0][0],
        "trials": jz.sql("SELECT COUNT(*) FROM trials WHERE study_id=?", study_id)[0][0],
        "params": jz.sql(f"SELECT COUNT(*) FROM params WHERE trial_id IN ({marks})",
                         *trial_ids)[0][0],
        "metrics": jz.sql(f"SELECT COUNT(*) FROM metrics WHERE trial_id IN ({marks})",
                          *trial_ids)[0][0],
        "events": jz.sql("SELECT COUNT(*) FROM events WHERE study_id=?", study_id)[0][0],
        "enqueued": jz.sql("SELECT COUNT(*) FROM enqueued WHERE study_id=?", study_id)[0][0],
    }


def test_delete_is_the_owners_after_a_stop_and_frees_the_name(jz):
    keygen(jz, "controller")
    keys = {n: keygen(jz, n) for n in ("alice", "bob", "carol", "d1")}
    write_keys(jz, [f"{keys['alice']} alice admin", f"{keys['bob']} bob user",
                    f"{keys['carol']} carol user", f"{keys['d1']} m1 dispatcher"])
    ep = f"tcp://127.0.0.1:{free_port()}"
    procs = [curve_controller(jz, ep)]
    home = jz.env["JIZHI_HOME"]
    bob, carol = as_key(jz, "bob"), as_key(jz, "carol")
    try:
        procs.append(jz.popen("dispatcher", "--controller", ep, "--name", "m1", "--key",
                              os.path.join(home, "d1.key"), "--slots", "2",
                              "--log-dir", os.path.join(jz.dir, "logs")))
        spec = live_spec("d1", trials=3, parallel=1, steps="100000")
        p = cli(jz, bob, "study", "submit", jz.write_spec(spec), "--controller", ep)
        assert p.returncode == 0, p.stderr
        for lr in ("0.05", "0.06"):  # the first may start at once, the second waits
            p = cli(jz, bob, "study", "enqueue", "d1", "lr=" + lr, "--controller", ep)
            assert p.returncode == 0, p.stderr
        tid = running_trial(jz)
        (sid,) = jz.sql("SELECT id FROM studies WHERE name='d1'")[0]
        before = rows_of(jz, sid, [tid])
        assert all(before[k] > 0 for k in ("studies", "trials", "params", "metrics",
                                             "events", "enqueued")), before

        # another user: refused, nothing changes
        p = cli(jz, carol, "study", "delete", "d1", "--yes", "--controller", ep)
        assert p.returncode == 1, p.stderr
        assert "carol may not delete study d1: it belongs to bob" in p.stderr
        p = cli(jz, carol, "study", "copy", "d1", "mine", "--controller", ep)
        assert p.returncode == 1 and "carol may not copy study d1" in p.stderr, p.stderr
        # running: refused, naming how to stop it
        p = cli(jz, bob, "study", "delete", "d1", "--yes", "--controller", ep)
        assert p.returncode == 1, p.stderr
        assert "study d1 is running: stop it first (`jizhi study stop d1`)" in p.stderr
        # no terminal to confirm on and no --yes: a usage error, before asking anyone
        p = subprocess.run([JIZHI, "study", "delete", "d1", "--controller", ep], cwd=jz.dir,
                           env=bob, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 2 and "--yes" in p.stderr, p.stderr
        assert jz.sql("SELECT state FROM studies") == [("running",)]
        assert rows_of(jz, sid, [tid])["trials"] == before["trials"]

        # stopped: its owner deletes it
        assert cli(jz, bob, "study", "stop", "d1", "--controller", ep).returncode == 0
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state IN "
                                   "('running', 'starting', 'paused')")[0][0] == 0, 60,
                    "the trials to stop")
        trial_ids = [i for (i,) in jz.sql("SELECT id FROM trials WHERE study_id=?", sid)]
        p = cli(jz, bob, "study", "delete", "d1", "--yes", "--controller", ep)
        assert p.returncode == 0, p.stderr
        assert re.search(r"study d1 deleted from .*: \d+ trials, \d+ metric points, "
                         r"\d+ events", p.stdout), p.stdout
        assert "left on disk: trial logs in " + os.path.join(jz.dir, "logs") in p.stdout
        assert "left on disk: checkpoints under " in p.stdout
        assert rows_of(jz, sid, trial_ids) == {k: 0 for k in before}
        assert os.listdir(os.path.join(jz.dir, "logs")), "the logs stay"
        (detail,) = jz.sql("SELECT detail FROM events WHERE kind='study_deleted'")[0]
        assert json.loads(detail)["last_trial"] == max(trial_ids)
        listed = json.loads(cli(jz, bob, "study", "list", "--json", "--controller",
                                ep).stdout)
        assert "d1" not in [s["name"] for s in listed]
        p = cli(jz, bob, "study", "delete", "d1", "--yes", "--controller", ep)
        assert p.returncode == 1 and 'no study named "d1"' in p.stderr

        # the name is free: a fixed spec under it runs, with new trial ids
        fixed = live_spec("d1", trials=1, parallel=1, steps="20")
        fixed["space"]["lr"]["high"] = 0.2
        p = cli(jz, bob, "study", "submit", jz.write_spec(fixed, "fixed.json"),
                "--controller", ep)
        assert p.returncode == 0 and "study d1 submitted" in p.stdout, p.stderr
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='d1'")[0][0]
                    == "finished", 90, "the fixed study to finish")
        new_ids = [i for (i,) in jz.sql("SELECT id FROM trials")]
        assert new_ids and min(new_ids) > max(trial_ids)
        # the admin may delete bob's finished study
        p = cli(jz, as_key(jz, "alice"), "study", "delete", "d1", "-y", "--controller", ep)
        assert p.returncode == 0, p.stderr
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(0,)]
    finally:
        stop(*procs)


def test_copy_starts_a_new_study_from_the_stored_spec(jz):
    ep, ctl, disp = daemons(jz)
    try:
        spec = base_spec("orig", ["sh", "-c", "jizhi report --step 1 score=1"], trials=2,
                         parallel=2)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the first study to finish")
        p = jz.run("study", "copy", "orig", "again", check=0)
        assert "study again submitted: the spec of orig, 2 trials" in p.stdout
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='again'")[0][0]
                    == "finished", 60, "the copy to finish")
        (a, b) = [json.loads(s) for (s,) in
                  jz.sql("SELECT spec FROM studies ORDER BY id")]
        assert b.pop("name") == "again" and a.pop("name") == "orig" and a == b
        counts = dict(jz.sql("SELECT s.name, COUNT(t.id) FROM studies s JOIN trials t "
                             "ON t.study_id=s.id GROUP BY s.name"))
        assert counts == {"orig": 2, "again": 2}
        # a used name, an unknown study: refused, nothing new
        p = jz.run("study", "copy", "orig", "again", check=1)
        assert 'a study named "again" already exists' in p.stderr
        p = jz.run("study", "copy", "nosuch", "x", check=1)
        assert 'no study named "nosuch"' in p.stderr
        assert jz.run("study", "copy", "orig", check=2).stderr.startswith(
            "jizhi: study copy: expected NAME NEW")
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(2,)]
        # on a terminal, delete asks first: n keeps the study, y deletes it
        for answer, rc in (("n", 1), ("y", 0)):
            p = subprocess.run(["script", "-qec", f"{JIZHI} study delete again", "/dev/null"],
                               cwd=jz.dir, env=jz.env, input=answer + "\n",
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == rc, p.stdout
            assert "delete study again (finished) and its 2 trials" in p.stdout, p.stdout
        assert "study again not deleted" not in p.stdout and "deleted from" in p.stdout
        assert [n for (n,) in jz.sql("SELECT name FROM studies")] == ["orig"]
    finally:
        stop(ctl, disp)


def test_a_resumed_trial_shows_nothing_of_its_stopped_attempt(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("sr", steps="100000")), check=0)
        tid = running_trial(jz)
        jz.run("study", "stop", "sr", check=0)
        jz.wait_trial_state(tid, "stopped", 30, "the trial to stop")
        (value, reason) = jz.sql("SELECT value, reason FROM trials WHERE id=?", tid)[0]
        assert value is not None and reason == "study stopped"
        jz.run("study", "resume", "sr", check=0)
        # the new attempt: no value, reason, step or last value of the old one
        (state, attempt, value, reason, last, step) = jz.sql(
            "SELECT state, attempt, value, reason, last_value, last_step FROM trials "
            "WHERE id=?", tid)[0]
        assert state in ("pending", "starting", "running") and attempt == 1
        assert value is None and not reason, (value, reason)
        p = jz.run("trial", "show", str(tid), "--json", check=0)
        shown = json.loads(p.stdout)
        assert shown["value"] is None and not shown.get("reason"), shown
    finally:
        stop(ctl, disp)


def test_a_resume_within_the_stop_grace_reruns_the_trial_the_kill_ends(jz):
    """A trial that reports with `jizhi report` never reads a stop: it is
    killed at the end of the grace. A resume before then runs it again
    once it has ended (before: it stayed stopped and the study finished
    without it), and the stop's event says it was carried out by that
    kill, not that the trial refused it. The grace (5 s) leaves the stop
    and the resume time on a loaded machine; the test waits for the kill
    anyway."""
    jz.env["JIZHI_STOP_GRACE_S"] = "5"
    ep, ctl, disp = daemons(jz)
    try:
        loop = "for i in $(seq 1 500); do jizhi report --step $i score=$i; sleep 0.1; done"
        spec = base_spec("grace", ["sh", "-c", loop], trials=1, parallel=1)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running_trial(jz)
        jz.run("study", "stop", "grace", check=0)
        jz.run("study", "resume", "grace", check=0)
        jz.wait_for(lambda: jz.sql("SELECT attempt, state FROM trials WHERE id=?", tid)[0]
                    in [(1, "starting"), (1, "running")], 30, "the trial to run again")
        assert jz.sql("SELECT state FROM studies") == [("running",)]
        ev = {k: t for k, t in jz.sql("SELECT kind, time FROM events WHERE kind IN "
                                      "('study_resumed', 'stopped')")}
        assert ev["study_resumed"] < ev["stopped"]  # resumed within the grace
        ((applied, result),) = jz.sql("SELECT applied, result FROM events WHERE "
                                      "kind='instruction' AND trial_id=?", tid)
        assert applied == 1, result
        assert result.startswith("carried out by a kill at the end of the 5 s stop grace")
        taken = "; the trial did not take it: the trial closed before polling it"
        assert result in (result.split(";")[0], result.split(";")[0] + taken), result
        p = jz.run("study", "events", "grace", check=0)
        (line,) = [x for x in p.stdout.splitlines() if " stop " in x]
        assert "applied in" in line and "study stopped; carried out by a kill" in line, line
    finally:
        stop(ctl, disp)


def test_a_resume_that_cannot_start_says_it_waits_and_why(jz):
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        ck = ["python3", os.path.join(PROGS, "ckpt_trial.py")]
        env = {"STEPS": "100000", "ACK_LOG": os.path.join(jz.dir, "acks")}
        full = base_spec("full", ck, trials=2, parallel=2, env=env)
        jz.run("study", "submit", jz.write_spec(full), check=0)
        a = running_trial(jz)
        jz.wait_for(lambda: jz.sql("SELECT checkpoint_step FROM trials WHERE id=?", a)[0][0]
                    or 0, 60, "a first checkpoint")
        p = jz.run("trial", "pause", str(a), "--release", check=0)
        assert f"trial {a}: released" in p.stdout
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE id<>? AND "
                                   "state='running'", a)[0][0] == 1, 60,
                    "the other trial to take the slot")
        # the only slot is taken: the resume is queued, and says so
        p = jz.run("trial", "resume", str(a), check=0)
        assert (f"trial {a}: restarting from its checkpoint once it gets a slot; it waits: "
                "no capacity: no dispatcher has a free slot") in p.stdout, p.stdout
        assert jz.sql("SELECT state FROM trials WHERE id=?", a)[0][0] == "pending"

        # a whole study resumed while another holds the slot
        late = base_spec("late", ck, trials=1, parallel=1, env=env)
        jz.run("study", "submit", jz.write_spec(late, "late.json"), check=0)
        jz.run("study", "stop", "late", check=0)
        p = jz.run("study", "resume", "late", check=0)
        assert "study late resumed" in p.stdout
        assert "study late waits: no capacity: no dispatcher has a free slot" in p.stdout
        jz.run("study", "stop", "late", check=0)
        p = jz.run("study", "submit", os.path.join(jz.dir, "late.json"), check=0)
        assert "study late continues" in p.stdout
        assert "study late waits: no capacity" in p.stdout, p.stdout
    finally:
        stop(ctl, disp)


def test_watch_fits_80_columns(jz):
    ep, ctl, disp = daemons(jz)
    tm = None
    try:
        spec = live_spec("eighty-columns-study", steps="4000")
        spec["space"]["momentum"] = {"type": "float", "low": 0.5, "high": 0.99}
        spec["space"]["optimizer"] = {"type": "choice", "values": ["sgd", "lars", "lamb"]}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running_trial(jz)
        tm = Tmux(jz, [JIZHI, "watch", "eighty-columns-study", "--db", jz.db, "--interval",
                       "0.2"])
        tm.tmux("resize-window", "-x", "80", "-y", "24")
        tm.wait_screen(rf"^>{tid}\s+running\s+\d+", "the running trial in 80 columns")
        tm.wait_screen(r"q quit\s*\Z", "the keys at the bottom")
        lines = tm.screen().rstrip("\n").splitlines()
        print("\n".join(lines))
        assert max(len(l) for l in lines) <= 80
        # nothing that matters is cut: the whole header, every key, the
        # params (cut with "..." where they do not fit)
        head = lines[0]
        assert re.match(r"eighty-columns-study \[running\] done 0/1 run 1 pend 0 fail 0 "
                        r"\d\d:\d\d:\d\d$", head.rstrip()), head
        keys = lines[-1]
        for k in ("j/k", "s stop", "p pause", "r resume", "e set", "o sort", "q quit"):
            assert k in keys, keys
        table = next(l for l in lines if l.startswith(f">{tid}"))
        assert "lr=" in table and (len(table.rstrip()) < 80 or table.rstrip().endswith("..."))
        assert re.search(r"^ID\s+STATE\s+STEP\s+TIME\s+score\s+PARAMS", lines[3].strip()), lines[3]
        assert re.search(rf"^trial {tid} \(try 1, running\)", lines[-3]), lines[-3]
    finally:
        if tm:
            tm.close()
        stop(ctl, disp)


def test_the_api_deletes_and_copies_with_the_same_rules(jz):
    from webutil import daemons_with_web, http, make_token
    ep, ctl, disp, url = daemons_with_web(jz)
    alice, bob = make_token(jz, "alice"), make_token(jz, "bob")
    try:
        st, j, _ = http("POST", url + "/api/studies",
                        live_spec("w1", trials=1, steps="100000"), token=alice)
        assert st == 200, j
        running_trial(jz)
        # running: 409, naming the stop; another user: 403; nothing changes
        st, j, _ = http("POST", url + "/api/studies/w1/delete", token=alice)
        assert st == 409 and "stop it first" in j["message"], j
        http("POST", url + "/api/studies/w1/stop", token=alice)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state IN "
                                   "('running', 'starting', 'paused')")[0][0] == 0, 60,
                    "the trial to stop")
        for path, body in (("delete", None), ("copy", {"name": "theirs"})):
            st, j, _ = http("POST", url + f"/api/studies/w1/{path}", body, token=bob)
            assert st == 403 and f"bob may not {path} study w1" in j["message"], j
        assert jz.sql("SELECT name FROM studies") == [("w1",)]
        # copy: a body with the new name; a used name is a conflict
        st, j, _ = http("POST", url + "/api/studies/w1/copy", {}, token=alice)
        assert st == 400 and j["error"] == "malformed", j
        st, j, _ = http("POST", url + "/api/studies/w1/copy", {"name": "w2"}, token=alice)
        assert st == 200 and j["ack"]["study"] == "w2" and j["ack"]["from"] == "w1", j
        st, j, _ = http("POST", url + "/api/studies/w1/copy", {"name": "w2"}, token=alice)
        assert st == 409 and j["error"] == "conflict", j
        # delete: the answer names what went and the folders left
        st, j, _ = http("POST", url + "/api/studies/w1/delete", token=alice)
        assert st == 200 and j["ack"]["deleted"] == "w1" and j["ack"]["trials"] == 1, j
        assert j["ack"]["logs"] and j["ack"]["checkpoints"].endswith("/w1"), j
        assert [n for (n,) in jz.sql("SELECT name FROM studies")] == ["w2"]
        st, j, _ = http("POST", url + "/api/studies/w1/delete", token=alice)
        assert st == 404, j
        http("POST", url + "/api/studies/w2/stop", token=alice)
    finally:
        stop(ctl, disp)


def test_the_page_deletes_a_finished_study_after_a_confirmation(jz):
    from test_web_browser import chromium, shot, wait_js
    from webutil import daemons_with_web, make_token
    drv = chromium()
    ep, ctl, disp, url = daemons_with_web(jz)
    tok = make_token(jz, "alice")
    try:
        spec = base_spec("gone", ["sh", "-c", "jizhi report --step 1 score=1"], trials=2,
                         parallel=2)
        spec["owner"] = "alice"
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the study to finish")
        drv.get(url + "/#/study/gone")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the study page")
        drv.find_element("id", "token-input").send_keys(tok)
        drv.find_element("id", "token-save").click()
        wait_js(drv, "document.getElementById('whoami').innerText.includes('alice')",
                what="the token accepted")
        shot(drv, "web-study-delete-button.png")
        # cancelled: nothing sent
        drv.execute_script("window.confirm = (t) => { window.asked = t; return false; }")
        drv.find_element("id", "study-delete").click()
        assert "Delete study gone: its 2 trials" in drv.execute_script("return window.asked")
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(1,)]
        # confirmed: deleted, and the page goes back to the list
        drv.execute_script("window.confirm = () => true")
        drv.find_element("id", "study-delete").click()
        wait_js(drv, "document.getElementById('study-ack').innerText.startsWith('deleted: 2 "
                "trials')", what="the deletion acknowledged")
        shot(drv, "web-study-deleted.png")
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(0,)]
        wait_js(drv, "location.hash === '#/'", what="back to the studies list")
    finally:
        drv.quit()
        stop(ctl, disp)
