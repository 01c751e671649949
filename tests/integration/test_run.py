"""End-to-end: `jizhi run` on the examples, exports, read-only commands,
crash retries, timeouts, bad specs and CLI usage errors."""
import csv
import io
import json
import os
import sqlite3

import pytest

from conftest import ROOT, PROGS, base_spec


def example(jz, name, **patch):
    with open(os.path.join(ROOT, "examples", name)) as f:
        spec = json.load(f)
    spec["trial"]["command"] = [
        os.path.join(ROOT, "examples", a) if a.startswith("./") else a
        for a in spec["trial"]["command"]]
    spec["trial"].get("env", {}).pop("PYTHONPATH", None)
    spec.update(patch)
    return jz.write_spec(spec), spec


def test_shell_example_runs_every_trial_and_exports(jz):
    path, spec = example(jz, "shell-quadratic.json")
    p = jz.run("run", path, check=0)
    assert "best trial" in p.stdout
    n = spec["budget"]["trials"]
    rows = jz.sql("SELECT id, state, value FROM trials ORDER BY number")
    assert len(rows) == n
    assert all(r[1] == "completed" for r in rows)
    # every trial reported score and epoch at steps 1..5
    for tid, _, value in rows:
        steps = jz.sql("SELECT step FROM metrics WHERE trial_id=? AND name='score' ORDER BY step", tid)
        assert [s for (s,) in steps] == [1, 2, 3, 4, 5]
        last = jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='score' AND step=5", tid)
        assert value == pytest.approx(last[0][0])
    # the value follows the formula of the shell objective
    for tid, _, value in rows:
        (params,) = jz.sql("SELECT value FROM params WHERE trial_id=? AND name='x'", tid)[0]
        (py,) = jz.sql("SELECT value FROM params WHERE trial_id=? AND name='y'", tid)[0]
        x, y = float(params), float(py)
        assert value == pytest.approx(1 - (x - 0.3) ** 2 - (y + 0.2) ** 2 - 0.02, abs=2e-6)
    # the printed best is the best stored
    best = max(r[2] for r in rows)
    assert f"score={best:.6g}" in p.stdout
    # export lists every trial with params and final metrics
    out = jz.run("study", "export", "shell-quadratic", "--format", "csv", check=0).stdout
    table = list(csv.DictReader(io.StringIO(out)))
    assert len(table) == n
    assert {"param_x", "param_y", "metric_score", "metric_epoch", "state", "value"} <= set(table[0])
    assert sorted(float(r["value"]) for r in table) == pytest.approx(sorted(r[2] for r in rows))
    js = json.loads(jz.run("study", "export", "shell-quadratic", "--format", "json", check=0).stdout)
    assert len(js) == n
    # each exported trial carries what the database holds for it
    for t in js:
        (state, value) = jz.sql("SELECT state, value FROM trials WHERE id=?", t["id"])[0]
        assert t["state"] == state == "completed"
        assert t["value"] == pytest.approx(value, rel=1e-12)
        stored = dict(jz.sql("SELECT name, value FROM params WHERE trial_id=?", t["id"]))
        assert set(t["params"]) == {"x", "y"}
        assert all(t["params"][k] == pytest.approx(float(stored[k]), rel=1e-15) for k in stored)
        last = dict(jz.sql("SELECT name, value FROM metrics WHERE trial_id=? AND step=5", t["id"]))
        assert t["metrics"]["score"] == pytest.approx(last["score"], rel=1e-12)
        assert t["metrics"]["epoch"] == 5
    # the CSV and the JSON agree
    assert sorted((int(r["id"]), float(r["value"])) for r in table) == \
        sorted((t["id"], pytest.approx(t["value"], rel=1e-9)) for t in js)


def test_python_example_uses_the_helper(jz):
    path, spec = example(jz, "python-objective.json")
    p = jz.run("run", path, check=0)
    rows = jz.sql("SELECT id, state, value FROM trials")
    assert len(rows) == spec["budget"]["trials"]
    assert all(r[1] == "completed" for r in rows), rows
    for tid, _, value in rows:
        epochs = jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=? AND name='val_acc'", tid)[0][0]
        assert epochs == 8
        assert 0.1 < value < 1.0
    assert "best trial" in p.stdout


def test_read_only_commands_without_controller(jz):
    path, _ = example(jz, "shell-quadratic.json")
    jz.run("run", path, check=0)
    assert not os.path.exists(jz.db + ".endpoint")
    studies = json.loads(jz.run("study", "list", "--json", check=0).stdout)
    assert studies[0]["name"] == "shell-quadratic" and studies[0]["state"] == "finished"
    assert studies[0]["completed"] == 12
    show = json.loads(jz.run("study", "show", "shell-quadratic", "--json", check=0).stdout)
    assert len(show["trials"]) == 12
    trials = json.loads(jz.run("trial", "list", "shell-quadratic", "--json", check=0).stdout)
    t = json.loads(jz.run("trial", "show", str(trials[0]["id"]), "--json", check=0).stdout)
    assert t["state"] == "completed" and "score" in t["metrics"]
    logs = jz.run("trial", "logs", str(trials[0]["id"]), check=0)
    assert logs.stdout == ""  # the shell example writes nothing to stdout
    # a finished study is reported, not rerun
    again = jz.run("run", path, check=0)
    assert "already finished" in again.stderr
    assert jz.sql("SELECT COUNT(*) FROM trials")[0][0] == 12


def test_crashing_trial_is_retried_then_failed_and_study_goes_on(jz):
    spec = base_spec("crashy", ["sh", os.path.join(PROGS, "crash_if_negative.sh"), "{x}"],
                     trials=6, parallel=2, retries=1)
    jz.run("run", jz.write_spec(spec))
    rows = jz.sql("SELECT number, state, attempt, exit_code, reason, value FROM trials ORDER BY number")
    assert len(rows) == 6
    xs = {n: float(v) for n, v in jz.sql(
        "SELECT t.number, p.value FROM trials t JOIN params p ON p.trial_id=t.id AND p.name='x'")}
    assert any(x < 0 for x in xs.values()) and any(x >= 0 for x in xs.values())
    for number, state, attempt, code, reason, value in rows:
        if xs[number] < 0:
            assert state == "failed" and attempt == 1 and code == 3, rows
            assert "status 3" in reason
        else:
            assert state == "completed" and attempt == 0 and value == pytest.approx(xs[number])
    retries = jz.sql("SELECT COUNT(*) FROM events WHERE kind='retry'")[0][0]
    assert retries == sum(1 for x in xs.values() if x < 0)


def test_trial_past_timeout_is_killed(jz):
    spec = base_spec("slow", ["sleep", "30"], trials=1, parallel=1, timeout_s=1)
    p = jz.run("run", jz.write_spec(spec), timeout=60)
    assert p.returncode == 1  # no trial completed
    (state, how, reason), = jz.sql("SELECT state, exit_how, reason FROM trials")
    assert state == "failed" and how == "timeout" and "timeout" in reason


def test_trial_without_objective_fails(jz):
    spec = base_spec("silent", ["true"], trials=2, parallel=2)
    jz.run("run", jz.write_spec(spec))
    rows = jz.sql("SELECT state, reason FROM trials")
    assert rows and all(s == "failed" and "without reporting its objective metric 'score'" in r for s, r in rows)


BAD_SPECS = [
    ("unknown key", lambda s: s.update(colour="red"), "colour: unknown key"),
    ("unknown param key", lambda s: s["space"]["x"].update(stride=2), "space.x.stride: unknown key"),
    ("wrong type", lambda s: s["budget"].update(trials="ten"), "budget.trials: must be an integer"),
    ("low > high", lambda s: s["space"]["x"].update(low=2.0), "space.x.low: must be <= high"),
    ("log low <= 0", lambda s: s["space"]["x"].update(low=0.0, log=True),
     "space.x.low: must be > 0 when log is true"),
    ("empty choice", lambda s: s["space"].update(c={"type": "choice", "values": []}),
     "space.c.values: must not be empty"),
    ("missing objective", lambda s: s.pop("objective"), "objective: missing"),
    ("command not found", lambda s: s["trial"].update(command=["no-such-program-xyz"]),
     "trial.command[0]: command not found"),
    ("unknown scheduler", lambda s: s["scheduler"].update(type="magic"), "scheduler.type"),
    ("bad placeholder", lambda s: s["trial"].update(command=["echo", "{nope}"]),
     "trial.command[1]: placeholder {nope}"),
]


@pytest.mark.parametrize("label,mutate,expected", BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_bad_spec_is_refused_before_anything_runs(jz, label, mutate, expected):
    spec = base_spec("bad", ["true"])
    mutate(spec)
    p = jz.run("run", jz.write_spec(spec))
    assert p.returncode == 1
    assert expected in p.stderr, p.stderr
    assert not os.path.exists(jz.db), "a refused spec must not create the database"


def test_invalid_json_file(jz):
    path = os.path.join(jz.dir, "broken.json")
    with open(path, "w") as f:
        f.write('{"name": "x", ')
    p = jz.run("run", path)
    assert p.returncode == 1 and "invalid JSON" in p.stderr
    p = jz.run("run", os.path.join(jz.dir, "missing.json"))
    assert p.returncode == 1 and "cannot read" in p.stderr


COMMANDS = [["run"], ["controller"], ["dispatcher"], ["study"], ["study", "list"],
            ["study", "export"], ["trial"], ["trial", "set"], ["report"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_command_has_help(jz, cmd):
    p = jz.run(*cmd, "--help", check=0)
    assert "usage: jizhi" in p.stdout


@pytest.mark.parametrize("args", [["frobnicate"], ["run", "--slots", "zero", "x.json"],
                                  ["run"], ["study", "nope"], ["trial", "show", "abc"],
                                  ["trial", "set", "1", "novalue"], ["report", "x"],
                                  ["study", "export", "s", "--format", "xml"]])
def test_usage_errors_exit_2(jz, args):
    p = jz.run(*args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.startswith("jizhi:") or "usage" in p.stderr


def test_operation_failures_exit_1(jz):
    assert jz.run("study", "list").returncode == 1  # no database yet
    p = jz.run("study", "stop", "nothing")
    assert p.returncode == 1 and "no controller" in p.stderr


def test_report_standalone_prints_to_stderr(jz):
    p = jz.run("report", "--step", "3", "loss=0.5", check=0)
    assert "loss" in p.stderr and "0.5" in p.stderr


def test_interrupted_run_continues_where_it_stopped(jz):
    import signal
    hold = os.path.join(jz.dir, "go")
    ack_log = os.path.join(jz.dir, "acked.log")
    # the trials hold after their first acknowledged step until `go` exists
    spec = base_spec("interrupted", ["python3", os.path.join(PROGS, "acked_reporter.py")],
                     trials=4, parallel=2, env={"ACK_LOG": ack_log, "HOLD_FILE": hold,
                                                "STEPS": "10", "STEP_SLEEP": "0.01"})
    spec["space"]["x"] = {"type": "float", "low": 0.3, "high": 0.99}  # no exact double
    path = jz.write_spec(spec)
    p = jz.popen("run", path)
    jz.wait_for(lambda: os.path.exists(ack_log) and len(open(ack_log).read().split("\n")) > 2,
                60, "both running trials' first reports")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1 and "run the same command again" in err
    # interrupted while both trials were held: none had completed
    assert jz.sql("SELECT COUNT(*) FROM trials WHERE state='completed'")[0][0] == 0
    assert jz.sql("SELECT COUNT(*) FROM trials WHERE state='failed'")[0][0] == 0
    open(hold, "w").close()
    again = jz.run("run", path, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "continuing study interrupted" in again.stderr
    rows = jz.sql("SELECT state FROM trials")
    assert len(rows) == 4 and all(s == "completed" for (s,) in rows)


def test_a_spec_with_decimals_is_the_same_study_when_run_again(jz):
    """0.3 and 0.99 have no exact double: the spec read back from the
    database (shortest reals, or %.17g as an older build wrote them) is
    still the same study; another spec is refused naming what differs."""
    spec = base_spec("dec", ["sh", "-c", "jizhi report score={x}"], trials=2, parallel=2)
    spec["space"]["x"] = {"type": "float", "low": 0.3, "high": 0.99}
    path = jz.write_spec(spec)
    jz.run("run", path, check=0)
    p = jz.run("run", path)
    assert p.returncode == 0 and "study dec already finished" in p.stderr, p.stderr
    # the row as an older build stored it
    con = sqlite3.connect(jz.db)
    with con:
        con.execute("UPDATE studies SET spec=replace(replace(spec, '\"high\":0.99', "
                    "'\"high\":0.98999999999999999'), '\"low\":0.3', "
                    "'\"low\":0.29999999999999999')")
    con.close()
    assert "0.98999999999999999" in jz.sql("SELECT spec FROM studies")[0][0]
    p = jz.run("run", path)
    assert p.returncode == 0 and "study dec already finished" in p.stderr, p.stderr
    spec["space"]["x"]["high"] = 0.98
    p = jz.run("run", jz.write_spec(spec))
    assert p.returncode == 1
    assert ("already exists with a different spec (space.x.high: stored 0.99, given "
            "0.98)") in p.stderr, p.stderr
    assert jz.sql("SELECT COUNT(*) FROM trials") == [(2,)]


def test_trial_logs_show_what_the_trial_wrote(jz):
    cmd = ["sh", "-c", "echo out-{x}; echo line2; echo err-{x} >&2; jizhi report score=1"]
    spec = base_spec("logs", cmd, trials=2, parallel=1)
    jz.run("run", jz.write_spec(spec), check=0)
    rows = jz.sql("SELECT t.id, p.value FROM trials t JOIN params p ON p.trial_id=t.id "
                  "AND p.name='x' ORDER BY t.number")
    assert len(rows) == 2
    for tid, x in rows:
        shown = float(x)
        out = jz.run("trial", "logs", str(tid), check=0).stdout.splitlines()
        err = jz.run("trial", "logs", str(tid), "--stderr", check=0).stdout.splitlines()
        assert len(out) == 2 and out[1] == "line2", out
        assert out[0].startswith("out-") and float(out[0][4:]) == pytest.approx(shown)
        assert len(err) == 1 and err[0].startswith("err-") and float(err[0][4:]) == pytest.approx(shown)
    # each trial's log is its own
    assert jz.run("trial", "logs", str(rows[0][0]), check=0).stdout != \
        jz.run("trial", "logs", str(rows[1][0]), check=0).stdout
    missing = jz.run("trial", "logs", "999")
    assert missing.returncode == 1 and "999" in missing.stderr
