"""Ask-and-tell (issue 41): trials a program asks for and ends itself, from
Python (jizhi.create_study / ask / tell / optimize, embedded and against a
daemon) and from a shell (`jizhi trial ask` / `jizhi trial tell`). Asked
trials are ordinary trials: study show and export list them, ASHA stops
them through should_stop(), a live `trial set` reaches their params; a tell
for an unknown, ended or another user's trial is refused and changes
nothing."""
import json
import os
import subprocess
import sys
import time

from conftest import BUILD, JIZHI, ROOT
from test_auth import as_key, cli, curve_controller, free_port, keygen, write_keys
from test_recovery import kill9_and_restart, start_controller, stop

sys.path.insert(0, os.path.join(ROOT, "trial_helper", "python"))


def ask_spec(name, trials=6, **extra):
    spec = {
        "name": name,
        "objective": {"metric": "loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 5},
        "budget": {"trials": trials},
        "space": {"x": {"type": "float", "low": -1.0, "high": 1.0},
                  "k": {"type": "int", "low": 1, "high": 4}},
    }
    spec.update(extra)
    return spec


def py_env(jz):
    env = dict(jz.env)
    env["JIZHI_BIN"] = JIZHI
    return env


SCRIPT = r'''
import json, sys, threading, time
import jizhi
spec = json.loads(sys.argv[1])
study = jizhi.create_study(spec, db=sys.argv[2])
lock = threading.Lock()
live = [0, 0]          # in flight now, most at once
def fn(trial):
    with lock:
        live[0] += 1
        live[1] = max(live)
    try:
        time.sleep(0.3)
        trial.report(0, loss=5.0)
        if trial.number == 2:
            raise ValueError("bad x %d" % trial.number)
        return (trial.params["x"] - 0.25) ** 2 + trial.params["k"]
    finally:
        with lock:
            live[0] -= 1
study.optimize(fn, n_trials=6, n_jobs=3)
out = {"most": live[1], "best_params": study.best_params, "best_value": study.best_value,
       "best_id": study.best_trial["id"],
       "trials": [(t["id"], t["state"], t["value"], t["reason"], t["params"])
                  for t in study.trials]}
errs = []
for bad in (out["trials"][0][0], 999):
    try:
        study.tell(bad, 1.0)
    except jizhi.JizhiError as e:
        errs.append(str(e))
out["errors"] = errs
t = study.ask()
t.report(3, loss=9.0)
study.tell(t, 0.5)
out["asked"] = t.id
print(json.dumps(out))
'''


def test_embedded_optimize_threads_failures_and_exports(jz):
    """No daemon: create_study starts one for the program's lifetime;
    optimize with 3 threads runs trials at once, a raising fn is a failed
    trial with its message, the best is the best completed; the trials are
    the study's in study show and export after the program ended."""
    script = os.path.join(jz.dir, "opt.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    p = subprocess.run([sys.executable, script, json.dumps(ask_spec("emb", trials=8)),
                        jz.db], cwd=jz.dir, env=py_env(jz), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["most"] >= 2
    trials = out["trials"]
    assert len(trials) == 6
    failed = [t for t in trials if t[1] == "failed"]
    assert len(failed) == 1 and failed[0][3] == "ValueError: bad x 2"
    done = [t for t in trials if t[1] == "completed"]
    assert len(done) == 5
    for _, _, value, _, params in done:
        assert abs(value - ((params["x"] - 0.25) ** 2 + params["k"])) < 1e-12
    best = min(done, key=lambda t: t[2])
    assert out["best_id"] == best[0] and out["best_value"] == best[2]
    assert out["best_params"] == best[4]
    assert "only a running trial can be told" in out["errors"][0]
    assert "no trial 999" in out["errors"][1]
    # the controller child ended with the program; the database holds it all
    jz.wait_for(lambda: not os.path.exists(jz.db + ".endpoint"), 10, "the child to exit")
    show = json.loads(jz.run("study", "show", "emb", "--json", "--db", jz.db, check=0).stdout)
    states = {t["id"]: t["state"] for t in show["trials"]}
    assert len(states) == 7 and states[out["asked"]] == "completed"
    last = [t for t in show["trials"] if t["id"] == out["asked"]][0]
    assert last["value"] == 0.5 and last["last_step"] == 4  # told after step 3
    csv = jz.run("study", "export", "emb", "--format", "csv", "--db", jz.db, check=0).stdout
    assert len(csv.strip().splitlines()) == 8 and "failed" in csv


def test_daemon_asha_should_stop_and_live_set(jz, monkeypatch):
    """Against a running controller: ASHA (resource step, grace 1, eta 2)
    stops the second trial whose rung-0 value is worse, should_stop() says
    so and its tell ends it pruned; `trial set` reaches an asked trial's
    params; optimize's TrialPruned is a pruned trial."""
    import jizhi

    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
        monkeypatch.setenv("JIZHI_BIN", JIZHI)
        monkeypatch.setenv("JIZHI_LIB", os.path.join(BUILD, "lib", "libjizhi.so"))
        ep = open(jz.db + ".endpoint").read().strip()
        spec = ask_spec("asha", trials=5, early_stopping={
            "type": "asha", "resource": "step", "grace": 1, "reduction": 2})
        study = jizhi.create_study(spec, db=jz.db, controller=ep)
        a = study.ask()
        a.report(1, loss=0.1)
        assert study.tell(a, 0.1)["state"] == "completed"
        b = study.ask()
        b.report(1, loss=0.9)
        end = time.time() + 10
        while not b.should_stop() and time.time() < end:
            time.sleep(0.05)
        assert b.should_stop()
        r = study.tell(b, 0.9)
        assert r["state"] == "pruned" and r["value"] == 0.9
        # a live set reaches the asked trial
        c = study.ask()
        jz.run("trial", "set", str(c.id), "x=0.5", "--no-wait", "--db", jz.db, check=0)
        end = time.time() + 10
        while c.params["x"] != 0.5 and time.time() < end:
            c.should_stop()
            time.sleep(0.05)
        assert c.params["x"] == 0.5
        study.tell(c, state="failed", message="gave up")

        def fn(t):
            raise jizhi.TrialPruned()

        study.optimize(fn, n_trials=1)
        # more than the budget's last trial: that one runs, then the refusal
        try:
            study.optimize(lambda t: 0.5, n_trials=3, n_jobs=2)
            raise AssertionError("optimize past the budget did not raise")
        except jizhi.JizhiError as e:
            assert "budget of 5 trials is used up" in str(e)
        again = jizhi.load_study("asha", db=jz.db, controller=ep)
        states = [t["state"] for t in again.trials]
        assert states == ["completed", "pruned", "failed", "pruned", "completed"]
        assert again.trials[2]["reason"] == "gave up"
        assert again.best_trial["id"] == a.id and again.best_value == 0.1
    finally:
        stop(ctl)


TWICE = r'''
import json, sys
import jizhi
spec = json.loads(sys.argv[1])
first = jizhi.create_study(spec, db=sys.argv[2])
t = first.ask()
first.tell(t, 0.5)
again = jizhi.create_study(spec, db=sys.argv[2])
print(json.dumps([(u["id"], u["state"]) for u in again.trials]))
spec["space"]["m"]["high"] = 0.98
try:
    jizhi.create_study(spec, db=sys.argv[2])
except jizhi.JizhiError as e:
    print(e)
'''


def test_create_study_twice_gives_the_same_study(jz):
    """docs/python.md: the same spec submitted again returns the same study,
    also with reals that have no exact double (0.1, 0.3, 0.99)."""
    script = os.path.join(jz.dir, "twice.py")
    with open(script, "w") as f:
        f.write(TWICE)
    spec = ask_spec("twice", trials=2, space={
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "m": {"type": "float", "low": 0.3, "high": 0.99}})
    p = subprocess.run([sys.executable, script, json.dumps(spec), jz.db], cwd=jz.dir,
                       env=py_env(jz), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert len(json.loads(out[0])) == 1 and json.loads(out[0])[0][1] == "completed", out
    assert ("different spec (space.m.high: stored 0.99, given 0.98)") in out[1], out


def test_cli_ask_tell_and_refusals(jz):
    """`jizhi trial ask/tell` from a shell; what is refused (exit 1 or 2)
    changes nothing."""
    jz.write_spec(ask_spec("sh", trials=2, objective=[
        {"metric": "loss", "mode": "min"}, {"metric": "ms", "mode": "min"}]), "sh.json")
    cmd = {"name": "cmd", "objective": {"metric": "loss", "mode": "min"},
           "scheduler": {"type": "random"}, "budget": {"trials": 1},
           "space": {"x": {"type": "float", "low": 0, "high": 1}},
           "trial": {"command": ["true"]}}
    jz.write_spec(cmd, "cmd.json")
    p = jz.run("run", "sh.json", "--db", os.path.join(jz.dir, "run.db"), check=1)
    assert "trial: missing: `jizhi run` starts trials with trial.command" in p.stderr
    assert not os.path.exists(os.path.join(jz.dir, "run.db"))
    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
        jz.run("study", "submit", "sh.json", check=0)
        jz.run("study", "submit", "cmd.json", check=0)
        p = jz.run("trial", "ask", "cmd", check=1)
        assert "runs its trials through dispatchers" in p.stderr
        p = jz.run("trial", "ask", "nope", check=1)
        assert "nope" in p.stderr
        line = jz.run("trial", "ask", "sh", check=0).stdout.split(" ", 1)
        tid, params = line[0], json.loads(line[1])
        assert set(params) == {"x", "k"} and -1 <= params["x"] <= 1
        info = json.loads(jz.run("trial", "ask", "sh", "--json", check=0).stdout)
        assert len(info["token"]) == 32 and info["study"] == "sh"
        p = jz.run("trial", "ask", "sh", check=1)
        assert "budget of 2 trials is used up" in p.stderr
        p = jz.run("trial", "tell", tid, "0.5", check=1)  # two objectives
        assert "tell 2 values, not 1" in p.stderr
        p = jz.run("trial", "tell", tid, "fast", check=2)
        assert "is not a number" in p.stderr
        p = jz.run("trial", "tell", "4242", "1", check=1)
        assert "no trial 4242" in p.stderr
        assert jz.sql("SELECT state FROM trials WHERE id=?", int(tid)) == [("running",)]
        p = jz.run("trial", "tell", tid, "--", "-0.5", "12", check=0)
        assert p.stdout.strip() == f"trial {tid}: completed, value -0.5"
        p = jz.run("trial", "tell", tid, "1", "2", check=1)
        assert "only a running trial can be told" in p.stderr
        jz.run("trial", "tell", str(info["trial"]), "pruned", check=0)
        rows = jz.sql("SELECT id, state, value FROM trials ORDER BY id")
        assert rows == [(int(tid), "completed", -0.5), (info["trial"], "pruned", None)]
        m = jz.sql("SELECT name, value FROM metrics WHERE trial_id=? ORDER BY name", int(tid))
        assert m == [("loss", -0.5), ("ms", 12.0)]
    finally:
        stop(ctl)


def test_foreign_tell_is_refused(jz):
    """Over CURVE: carol can neither ask for nor tell bob's trials; bob can."""
    keygen(jz, "controller")
    keys = {n: keygen(jz, n) for n in ("bob", "carol")}
    write_keys(jz, [f"{keys['bob']} bob user", f"{keys['carol']} carol user"])
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = curve_controller(jz, ep)
    try:
        spec = jz.write_spec(ask_spec("b", trials=3))
        assert cli(jz, as_key(jz, "bob"), "study", "submit", spec, "--controller",
                   ep).returncode == 0
        p = cli(jz, as_key(jz, "bob"), "trial", "ask", "b", "--controller", ep)
        assert p.returncode == 0, p.stderr
        tid = p.stdout.split()[0]
        p = cli(jz, as_key(jz, "carol"), "trial", "tell", tid, "1", "--controller", ep)
        assert p.returncode == 1 and f"carol may not tell trial {tid} of study b" in p.stderr
        p = cli(jz, as_key(jz, "carol"), "trial", "ask", "b", "--controller", ep)
        assert p.returncode == 1 and "carol may not ask for trials of study b" in p.stderr
        assert jz.sql("SELECT id, state FROM trials") == [(int(tid), "running")]
        p = cli(jz, as_key(jz, "bob"), "trial", "tell", tid, "1", "--controller", ep)
        assert p.returncode == 0, p.stderr
        assert jz.sql("SELECT state, value FROM trials") == [("completed", 1.0)]
        # bob from Python over CURVE: the asked trial's reports arrive too
        code = ("import jizhi, sys\n"
                "s = jizhi.load_study('b', controller=sys.argv[1])\n"
                "t = s.ask(); t.report(1, loss=0.25)\n"
                "print(t.id, s.tell(t, 0.2)['state'])\n")
        env = dict(as_key(jz, "bob"), JIZHI_BIN=JIZHI)
        p = subprocess.run([sys.executable, "-c", code, ep], cwd=jz.dir, env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        pid, state = p.stdout.split()
        assert state == "completed"
        assert jz.sql("SELECT step, value FROM metrics WHERE trial_id=? ORDER BY step",
                      int(pid)) == [(1, 0.25), (2, 0.2)]
    finally:
        stop(ctl)


def test_step_round_trip_ask_enqueue_export(jz):
    """A stepped float and int (and a log int) from the spec through bo's
    suggestions (asked) to the export; an enqueued value off the grid is
    refused naming the step, one on it runs first."""
    spec = ask_spec("st", trials=7, scheduler={"type": "bo", "seed": 2, "n_init": 3})
    spec["space"] = {"x": {"type": "float", "low": -1, "high": 1, "step": 0.25},
                     "k": {"type": "int", "low": 2, "high": 32, "step": 6},
                     "m": {"type": "int", "low": 1, "high": 64, "log": True}}
    jz.write_spec(spec, "st.json")
    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
        jz.run("study", "submit", "st.json", check=0)
        p = jz.run("study", "enqueue", "st", "x=0.3", "k=8", "m=2", check=1)
        assert "params.x: must be a number from -1 to 1 in steps of 0.25" in p.stderr
        jz.run("study", "enqueue", "st", "x=0.75", "k=8", "m=2", check=0)
        for i in range(7):
            info = json.loads(jz.run("trial", "ask", "st", "--json", check=0).stdout)
            x = info["params"]["x"]
            if i == 0:
                assert info["params"] == {"x": 0.75, "k": 8, "m": 2}
            jz.run("trial", "tell", str(info["trial"]), "--", repr((x - 0.5) ** 2), check=0)
        rows = json.loads(jz.run("study", "export", "st", "--format", "json",
                                 check=0).stdout)
        trials = rows["trials"] if isinstance(rows, dict) else rows
        assert len(trials) == 7
        for t in trials:
            x, k, m = t["params"]["x"], t["params"]["k"], t["params"]["m"]
            assert x in [-1 + 0.25 * i for i in range(9)], x
            assert isinstance(k, int) and (k - 2) % 6 == 0 and 2 <= k <= 32, k
            assert isinstance(m, int) and 1 <= m <= 64
        show = json.loads(jz.run("study", "show", "st", "--json", check=0).stdout)
        assert show["spec"]["space"]["x"]["step"] == 0.25
    finally:
        stop(ctl)


def test_a_study_stop_and_resume_leave_asked_trials_to_their_tell(jz):
    """A resume never runs an asked trial again: nothing hands out a pending
    trial of an ask-only study (it stayed pending and the study never
    finished). One still running when the study resumes keeps running, its
    stop withdrawn, so its tell stands; one told while the study was
    stopped stays as it ended, its stop carried out by the tell."""
    jz.write_spec(ask_spec("sr", trials=1), "sr.json")
    jz.write_spec(ask_spec("st", trials=1), "st.json")
    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
        jz.run("study", "submit", "sr.json", check=0)
        jz.run("study", "submit", "st.json", check=0)
        a = jz.run("trial", "ask", "sr", check=0).stdout.split()[0]
        b = jz.run("trial", "ask", "st", check=0).stdout.split()[0]
        # stop, resume, then the tell
        jz.run("study", "stop", "sr", check=0)
        jz.run("study", "resume", "sr", check=0)
        p = jz.run("trial", "tell", a, "0.5", check=0)
        assert p.stdout.strip() == f"trial {a}: completed, value 0.5"
        # stop, the tell, then resume
        jz.run("study", "stop", "st", check=0)
        p = jz.run("trial", "tell", b, "0.25", check=0)
        assert p.stdout.strip() == f"trial {b}: stopped, value 0.25"
        jz.run("study", "resume", "st", check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM studies WHERE state='finished'")
                    == [(2,)], 20, "both studies to finish")
        assert jz.sql("SELECT id, state, attempt, value FROM trials ORDER BY id") == [
            (int(a), "completed", 0, 0.5), (int(b), "stopped", 0, 0.25)]
        (wa, wb) = jz.sql("SELECT trial_id, applied, result FROM events WHERE "
                          "kind='instruction' ORDER BY trial_id")
        assert wa == (int(a), 0, "withdrawn: the study was resumed before the trial was "
                      "told"), wa
        assert wb[:2] == (int(b), 1) and wb[2].startswith("the trial was told "), wb
        assert wb[2].endswith(" s after the stop"), wb
    finally:
        stop(ctl)


def test_instructions_a_killed_controller_held_are_resolved_at_the_restart(jz):
    """An asked trial never polls: its set and stop wait in the controller's
    memory, and a kill -9 lost them (`study events` showed them pending for
    good). The next controller resolves them as not applied, saying why;
    the trial's tell then completes it (the stop went with the controller)."""
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    ctl2 = None
    try:
        jz.run("study", "submit", jz.write_spec(ask_spec("k9", trials=1)), check=0)
        tid = jz.run("trial", "ask", "k9", check=0).stdout.split()[0]
        jz.run("trial", "set", tid, "x=0.5", "--no-wait", check=0)
        jz.run("trial", "stop", tid, check=0)
        held = "SELECT COUNT(*) FROM events WHERE kind='instruction' AND applied IS NULL"
        assert jz.sql(held) == [(2,)]
        ctl2 = kill9_and_restart(jz, ctl, ep)
        jz.wait_for(lambda: jz.sql(held) == [(0,)], 20, "the instructions to be resolved")
        why = "the controller restarted before it was resolved"
        assert jz.sql("SELECT applied, result FROM events WHERE kind='instruction'") == [
            (0, why), (0, why)]
        p = jz.run("study", "events", "k9", check=0)
        lines = [x for x in p.stdout.splitlines() if why in x]
        assert len(lines) == 2 and all("refused" in x for x in lines), p.stdout
        p = jz.run("trial", "tell", tid, "0.5", check=0)
        assert p.stdout.strip() == f"trial {tid}: completed, value 0.5"
    finally:
        stop(*(x for x in (ctl, ctl2) if x))


def s_sig_digits(num):
    """Significant digits of a JSON number's text."""
    mant = num.lstrip("-").split("e")[0].split("E")[0].replace(".", "")
    return len(mant.strip("0")) or 1


def test_tell_under_use_best_and_numbers_in_shortest_form(jz, monkeypatch):
    """objective use "best": a tell is one more metric point, so the trial's
    value is the best of its reports and the told value, as a dispatched
    trial's would be (review40 item 3). `trial ask`'s text and the web
    JSON write each number in its shortest exact form, 0.1 not
    0.10000000000000001 (item 11)."""
    import re
    import jizhi
    from webutil import http, serve

    ctl = jz.popen("controller", "--db", jz.db)
    srv = None
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
        monkeypatch.setenv("JIZHI_BIN", JIZHI)
        monkeypatch.setenv("JIZHI_LIB", os.path.join(BUILD, "lib", "libjizhi.so"))
        ep = open(jz.db + ".endpoint").read().strip()
        spec = ask_spec("ub", trials=3,
                        objective={"metric": "loss", "mode": "min", "use": "best"})
        spec["space"]["s"] = {"type": "float", "low": 0.0, "high": 1.0, "step": 0.1}
        study = jizhi.create_study(spec, db=jz.db, controller=ep)
        t = study.ask()
        t.report(1, loss=0.1)
        t.report(2, loss=0.3)
        r = study.tell(t, 0.5)
        assert r["state"] == "completed" and r["value"] == 0.1
        assert jz.sql("SELECT value, last_value, best_value FROM trials WHERE id=?",
                      t.id) == [(0.1, 0.5, 0.1)]
        assert study.best_value == 0.1

        def shortest(text):
            nums = re.findall(r"-?\d+\.\d+(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+", text)
            long = [n for n in nums if s_sig_digits(n) > s_sig_digits(repr(float(n)))]
            assert nums and not long, (long, text[:300])

        line = jz.run("trial", "ask", "ub", "--db", jz.db, check=0).stdout
        shortest(line.split(" ", 1)[1])
        srv, url = serve(jz)
        for path in ("", "/page", "/pareto"):
            st, body, _ = http("GET", url + "/api/studies/ub" + path, raw=True)
            assert st == 200, body
            assert b'"step":0.1' in body or path != "", body[:300]
            shortest(body.decode())
    finally:
        if srv:
            srv.terminate()
            srv.wait(timeout=10)
        stop(ctl)


def test_obeyed_stop_pruned_reasons_and_optimize_after_extend(jz, monkeypatch):
    """review40: a stop should_stop() saw and the program obeyed (tell) reads
    as taken (item 1); TrialPruned("why") and `trial tell ID pruned MESSAGE`
    keep their reason (item 7); optimize() with its default n_trials uses a
    `study extend` (item 2)."""
    import jizhi

    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
        monkeypatch.setenv("JIZHI_BIN", JIZHI)
        monkeypatch.setenv("JIZHI_LIB", os.path.join(BUILD, "lib", "libjizhi.so"))
        ep = open(jz.db + ".endpoint").read().strip()
        study = jizhi.create_study(ask_spec("obey", trials=3), db=jz.db, controller=ep)
        a = study.ask()
        a.report(0, loss=1.0)
        jz.run("trial", "stop", str(a.id), "--db", jz.db, check=0)
        end = time.time() + 10
        while not a.should_stop() and time.time() < end:
            time.sleep(0.02)
        assert a.should_stop()
        assert study.tell(a, state="pruned")["state"] == "stopped"
        ev = jz.sql("SELECT applied, result FROM events WHERE kind='instruction' AND "
                    "trial_id=? AND json_extract(detail, '$.kind')='stop'", a.id)
        assert len(ev) == 1 and ev[0][0] == 1 and "did not take it" not in (ev[0][1] or ""), ev

        def pruned(t):
            raise jizhi.TrialPruned("too slow")

        study.optimize(pruned, n_trials=1)
        c = json.loads(jz.run("trial", "ask", "obey", "--json", "--db", jz.db, check=0).stdout)
        jz.run("trial", "tell", str(c["trial"]), "pruned", "lost patience", "--db", jz.db,
               check=0)
        assert [(t["state"], t["reason"]) for t in study.trials[1:]] == [
            ("pruned", "too slow"), ("pruned", "lost patience")]
        study.optimize(lambda t: 0.5)  # the budget is used up: nothing to run
        assert len(study.trials) == 3
        jz.run("study", "extend", "obey", "--trials", "2", "--db", jz.db, check=0)
        study.optimize(lambda t: 0.5)
        assert [t["state"] for t in study.trials[3:]] == ["completed", "completed"]
    finally:
        stop(ctl)
