"""Alerts: rules in the spec and in the controller's --alerts file fire once
per (rule, trial), become events and `jizhi alerts` rows, and run their hook
(argv, no shell) with the alert as JSON on stdin -- exactly once, also across
a controller killed with -9 and started again. Stalled trials are detected."""
import json
import os
import signal
import sys

from conftest import PROGS, base_spec
from test_recovery import start_controller, start_dispatcher, stop


def hook(path):
    # appends its stdin (the alert) as one line to `path`
    return [sys.executable, "-c",
            "import sys; d = sys.stdin.read(); open(sys.argv[1], 'a').write(d.strip() + '\\n')",
            path]


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_alert_hooks_fire_once_per_rule_and_trial(jz):
    fired = os.path.join(jz.dir, "fired.jsonl")
    ctl_fired = os.path.join(jz.dir, "ctl_fired.jsonl")
    rules = os.path.join(jz.dir, "alerts.json")
    with open(rules, "w") as f:
        json.dump({"alerts": [{"on": "trial_failed", "name": "ops", "hook": hook(ctl_fired)}]}, f)
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = jz.popen("controller", "--db", jz.db, "--bind", ep, "--alerts", rules,
                   "--log", os.path.join(jz.dir, "controller.log"))
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the controller")
    disp = start_dispatcher(jz, ep)
    try:
        # x in [-1, -0.5]: every trial fails; 3 trials, stop after 3 in a row
        spec = base_spec("failing", [os.path.join(PROGS, "crash_if_negative.sh"), "{x}"],
                         trials=3, parallel=1)
        spec["space"] = {"x": {"type": "float", "low": -1.0, "high": -0.5}}
        spec["budget"]["max_consecutive_failures"] = 0
        spec["alerts"] = [
            {"on": "trial_failed", "hook": hook(fired)},
            {"on": "failures_in_a_row", "count": 2, "name": "two", "hook": hook(fired)},
            {"on": "study_finished", "hook": hook(fired)},
        ]
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 90,
                    "the study to finish")
        jz.wait_for(lambda: len(lines(fired)) >= 3 + 2 + 1 and len(lines(ctl_fired)) >= 3, 30,
                    "the hooks to run")
        got = lines(fired)
        # once per rule and trial: 3 failures, the 2nd and 3rd make two in a row,
        # the study finished once
        by_rule = {}
        for a in got:
            by_rule.setdefault(a["rule"], []).append(a["trial"])
        tids = [t for (t,) in jz.sql("SELECT id FROM trials ORDER BY id")]
        assert sorted(by_rule["study:trial_failed#0"]) == tids
        assert sorted(by_rule["study:two"]) == tids[1:]
        assert by_rule["study:study_finished#2"] == [None]
        assert len(got) == 6
        assert all(a["study"] == "failing" for a in got)
        assert all(a["on"] in ("trial_failed", "failures_in_a_row", "study_finished") for a in got)
        assert sorted(a["trial"] for a in lines(ctl_fired)) == tids
        assert {a["rule"] for a in lines(ctl_fired)} == {"controller:ops"}
        # events and `jizhi alerts` say the same
        ev = json.loads(jz.run("study", "events", "failing", "--json", check=0).stdout)
        assert len([e for e in ev if e["kind"] == "alert"]) == 9
        al = json.loads(jz.run("alerts", "--json", check=0).stdout)
        assert len(al) == 9 and {a["study"] for a in al} == {"failing"}
        out = jz.run("alerts", "failing", check=0).stdout
        assert "study:two" in out and "controller:ops" in out
        # the same through the controller (remote read)
        al2 = json.loads(jz.run("alerts", "failing", "--json", "--controller", ep, check=0).stdout)
        assert al2 == al
        p = jz.run("alerts", "nosuch")
        assert p.returncode == 1 and "nosuch" in p.stderr
    finally:
        stop(ctl, disp)


def test_stalled_trial_alert_once_across_kill9_and_restart(jz):
    fired = os.path.join(jz.dir, "fired.jsonl")
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep, lost="60")
    disp = start_dispatcher(jz, ep, 1)
    ctl2 = None
    try:
        # a trial that never reports: stalled after 1 s; a second rule after 4 s
        spec = base_spec("quiet", ["sleep", "300"], trials=1, parallel=1)
        spec["trial"]["timeout_s"] = 0
        spec["alerts"] = [{"on": "stalled", "seconds": 1, "name": "quiet", "hook": hook(fired)},
                          {"on": "stalled", "seconds": 4, "name": "late", "hook": hook(fired)}]
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: [a["rule"] for a in lines(fired)] == ["study:quiet"], 60,
                    "the stalled alert")
        assert lines(fired)[0]["on"] == "stalled"
        assert lines(fired)[0]["detail"]["silent_s"] >= 1
        # kill -9 before the late rule fires, then start again: the trial is
        # still silent; the late rule fires (so the check ran after the
        # restart, with silence past 1 s), the first one does not again
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=30)
        assert [a["rule"] for a in lines(fired)] == ["study:quiet"]
        os.unlink(jz.db + ".endpoint")
        ctl2 = start_controller(jz, ep, lost="60")
        jz.wait_for(lambda: len(lines(fired)) >= 2, 60, "the late stalled alert")
        assert [a["rule"] for a in lines(fired)] == ["study:quiet", "study:late"]
        assert jz.sql("SELECT rule FROM alerts ORDER BY id") == [("study:quiet",), ("study:late",)]
        assert jz.sql("SELECT state FROM trials") == [("running",)]
        jz.run("study", "stop", "quiet", check=0)
    finally:
        stop(*(p for p in (ctl2, ctl, disp) if p))


def test_bad_alert_rules_are_refused_naming_the_field(jz):
    spec = base_spec("bad", ["true"], trials=1)
    cases = [
        ([{"on": "failures_in_a_row"}], "alerts[0].count"),
        ([{"on": "stalled", "seconds": 0}], "alerts[0].seconds"),
        ([{"on": "explode"}], "alerts[0].on"),
        ([{"on": "trial_failed", "hook": "echo hi"}], "alerts[0].hook"),
        ([{"on": "trial_failed", "count": 3}], "alerts[0].count"),
        ([{"on": "trial_failed", "name": "a"}, {"on": "guard", "name": "a"}], "alerts[1].name"),
        ({"on": "trial_failed"}, "alerts"),
    ]
    for rules, field in cases:
        spec["alerts"] = rules
        p = jz.run("study", "submit", jz.write_spec(spec), "--db", jz.db)
        assert p.returncode in (1, 2) and field in p.stderr, (rules, p.stderr)
    bad = os.path.join(jz.dir, "alerts.json")
    with open(bad, "w") as f:
        json.dump({"alerts": [{"on": "stalled"}]}, f)
    p = jz.run("controller", "--db", jz.db, "--bind", f"ipc://{jz.dir}/c.sock", "--alerts", bad)
    assert p.returncode == 1 and "alerts[0].seconds" in p.stderr
    assert not os.path.exists(jz.db + ".endpoint")
