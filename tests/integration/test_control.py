"""Steering running trials through the daemons: live `trial set` with
acknowledgement, refusals, pause/resume, stop, study stop/resume, events
with latencies, and a dispatcher lost and replaced."""
import json
import os
import signal
import subprocess

from conftest import JIZHI, PROGS, base_spec
from test_recovery import start_controller, start_dispatcher, stop


def daemons(jz, slots="2", lost="20"):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep, lost)
    disp = start_dispatcher(jz, ep, slots)
    return ep, ctl, disp


def live_spec(name, trials=1, parallel=1, steps="400"):
    spec = base_spec(name, ["python3", os.path.join(PROGS, "live_trial.py")], trials=trials,
                     parallel=parallel, env={"STEPS": steps})
    spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}}
    return spec


def running_trial(jz):
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0, 60, "a reporting trial")
    return jz.sql("SELECT id FROM trials WHERE state='running' ORDER BY id")[0][0]


def two_running_trials(jz):
    """The ids of a study's two running trials, once both have reported."""
    jz.wait_for(lambda: jz.sql("SELECT COUNT(DISTINCT trial_id) FROM metrics")[0][0] == 2, 60,
                "two reporting trials")
    return [r[0] for r in jz.sql("SELECT id FROM trials WHERE state='running' ORDER BY id")]


def last_step(jz, tid):
    return jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?", tid)[0][0] or 0


def held_while_paused(jz, tid, control, steps=8):
    """Checks that paused trial `tid` makes no progress, with waits on
    events, not on the clock: its pause is acknowledged as applied (the
    helper then holds the program); the control trial (the same program at
    the same step time, not paused) makes `steps` steps, so that a report
    the paused one had in flight lands; the paused one's last step is read;
    the control makes `steps` more, and the paused one none. Returns the
    paused trial's last step."""
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM events WHERE trial_id=? AND "
                               "kind='instruction' AND applied=1 AND "
                               "json_extract(detail, '$.kind')='pause'", tid)[0][0] == 1,
                30, "the pause acknowledged")

    def control_steps():
        o = last_step(jz, control)
        jz.wait_for(lambda: last_step(jz, control) >= o + steps, 60,
                    f"{steps} steps of the control trial {control}")

    control_steps()
    s1 = last_step(jz, tid)
    control_steps()
    assert last_step(jz, tid) == s1, "a paused trial made progress"
    return s1


def test_trial_set_changes_lr_at_the_next_step_and_is_acknowledged(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("live")), check=0)
        tid = running_trial(jz)
        # a few steps at the sampled lr first, so there is a "before" to compare
        jz.wait_for(lambda: (jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND "
                                    "name='lr'", tid)[0][0] or 0) >= 3, 30, "3 steps")
        # 0.5 lies outside the space [0.01, 0.1]: refused, then sent with --force
        p = jz.run("trial", "set", str(tid), "lr=0.5")
        assert p.returncode == 1 and "outside the space" in p.stderr
        p = jz.run("trial", "set", str(tid), "lr=0.5", "--force", check=0)
        assert "acknowledged" in p.stdout
        # the step after the acknowledgement reports the new lr
        (ack_step,) = jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND name='lr'", tid)[0]
        jz.wait_for(lambda: jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?", tid)[0][0]
                    > ack_step + 2, 30, "more steps")
        later = jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='lr' AND step>?",
                       tid, ack_step + 1)
        assert later and all(v == 0.5 for (v,) in later)
        before = jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='lr' AND step<=?",
                        tid, ack_step - 1)
        assert before and all(v < 0.11 for (v,) in before)
        # the applied value is the trial's param now: a new params generation
        (gen,) = jz.sql("SELECT generation FROM trials WHERE id=?", tid)[0]
        assert gen == 1
        assert jz.sql("SELECT value FROM params WHERE trial_id=? AND generation=1 AND name='lr'",
                      tid) == [("0.5",)]
        # an unknown key is refused by the program, with its reason
        p = jz.run("trial", "set", str(tid), "colour=5")
        assert p.returncode == 1 and "unknown parameter colour" in p.stderr
        # both are events with applied/refused and a latency
        ev = json.loads(jz.run("study", "events", "live", "--json", check=0).stdout)
        ins = [e for e in ev if e["kind"] == "instruction"]
        assert [(e["detail"]["name"], e["applied"]) for e in ins] == [("lr", True), ("colour", False)]
        assert all(e["latency_s"] is not None and e["latency_s"] >= 0 for e in ins)
        assert all(e["who"] == "cli" for e in ins)
        # stop ends the trial as stopped, not failed
        jz.run("trial", "stop", str(tid), check=0)
        jz.wait_trial_state(tid, "stopped", 30, "the trial to stop")
        # a set on an ended trial fails clearly and changes nothing
        n = jz.sql("SELECT COUNT(*) FROM events")[0][0]
        p = jz.run("trial", "set", str(tid), "lr=0.2")
        assert p.returncode == 1 and "not running" in p.stderr
        assert jz.sql("SELECT COUNT(*) FROM events")[0][0] == n
    finally:
        stop(ctl, disp)


def test_pause_and_resume_hold_the_trial(jz):
    ep, ctl, disp = daemons(jz)
    try:
        # two trials: the second is the control that shows time passing
        jz.run("study", "submit", jz.write_spec(live_spec("pause", trials=2, parallel=2)),
               check=0)
        tid, control = two_running_trials(jz)
        jz.run("trial", "pause", str(tid), check=0)
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid) == [("paused",)]
        s2 = held_while_paused(jz, tid, control)
        jz.run("trial", "resume", str(tid), check=0)
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid) == [("running",)]
        jz.wait_for(lambda: jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?", tid)[0][0]
                    > s2, 30, "progress after resume")
        jz.run("trial", "stop", str(tid), check=0)
        jz.run("trial", "stop", str(control), check=0)
    finally:
        stop(ctl, disp)


def test_study_stop_and_resume(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("sr", trials=3, parallel=2, steps="40")),
               check=0)
        running_trial(jz)
        jz.run("study", "stop", "sr", check=0)
        jz.wait_for(lambda: all(s != "running" for (s,) in jz.sql("SELECT state FROM trials")), 30,
                    "trials to stop")
        assert jz.sql("SELECT state FROM studies") == [("stopped",)]
        jz.run("study", "resume", "sr", check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 90,
                    "the study to finish")
        states = [s for (s,) in jz.sql("SELECT state FROM trials")]
        assert states == ["completed"] * 3
    finally:
        stop(ctl, disp)


def test_dispatcher_killed_trials_are_lost_and_retried(jz):
    ep, ctl, disp = daemons(jz)
    disp2 = None
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("lost", trials=2, parallel=2, steps="60")),
               check=0)
        running_trial(jz)
        disp.send_signal(signal.SIGKILL)
        disp.wait(timeout=10)
        disp2 = start_dispatcher(jz, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish on the new dispatcher")
        rows = jz.sql("SELECT state, attempt FROM trials")
        assert all(s == "completed" for s, _ in rows), rows
        assert any(a >= 1 for _, a in rows), "no trial was retried"
        reasons = [json.loads(d)["reason"] for (d,) in jz.sql(
            "SELECT detail FROM events WHERE kind='retry'")]
        assert reasons and all(r.startswith("lost") for r in reasons)
    finally:
        stop(*(p for p in (ctl, disp, disp2) if p))


def test_libjizhi_exports_only_jz_symbols_and_builds_with_pkg_config(jz, tmp_path):
    build = os.path.dirname(os.path.dirname(JIZHI))
    out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(build, "lib", "libjizhi.so")],
                         capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert "jz_open" in names and "jz_report" in names
    assert all(n.startswith("jz_") for n in names), [n for n in names if not n.startswith("jz_")]
    src = tmp_path / "prog.c"
    src.write_text('#include <jizhi.h>\n#include <stdio.h>\nint main(void) {\n'
                   '  jz_trial *t = jz_open();\n  double lr = jz_param_double(t, "lr", 0.25);\n'
                   '  jz_report(t, 1, "loss", lr * 2);\n  printf("lr=%g\\n", lr);\n'
                   '  jz_close(&t);\n  return 0;\n}\n')
    env = dict(jz.env, PKG_CONFIG_PATH=os.path.join(build, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "jizhi"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["cc", str(src), "-o", str(tmp_path / "prog"), *flags,
                    "-Wl,-rpath," + os.path.join(build, "lib")], check=True)
    p = subprocess.run([str(tmp_path / "prog")], env=dict(env, JIZHI_PARAMS='{"lr": 0.5}'),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "lr=0.5" in p.stdout and "loss" in p.stderr


def test_pause_release_frees_the_slot_and_resume_restarts_from_the_checkpoint(jz):
    # two trials, one slot: the second waits for the slot the first releases
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        spec = base_spec("release", ["jizhi-train", "--dataset", "synthetic", "--synthetic-n",
                                     "4000", "--epochs", "60", "--threads", "1", "--quiet",
                                     "--log-every", "5"], trials=2, parallel=2)
        spec["objective"] = {"metric": "val_acc", "mode": "max"}
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.05, "log": True}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: (jz.sql("SELECT MAX(step) FROM metrics")[0][0] or 0) >= 100, 60,
                    "training progress")
        # only the first runs: the second has no slot
        running = jz.sql("SELECT id FROM trials WHERE state='running'")
        assert len(running) == 1
        (tid,) = running[0]
        assert jz.sql("SELECT COUNT(DISTINCT trial_id) FROM metrics")[0][0] == 1
        p = jz.run("trial", "pause", str(tid), "--release", check=0)
        assert f"trial {tid}: released" in p.stdout  # it waits for the outcome
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "suspended"
        (ckpt, ckpt_step, attempt) = jz.sql(
            "SELECT checkpoint, checkpoint_step, attempt FROM trials WHERE id=?", tid)[0]
        assert os.path.exists(ckpt) and ckpt_step >= 100 and attempt == 0
        # the freed slot goes to the other trial, which trains while the first is suspended
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id<>?", tid)[0][0]
                    > 0, 60, "the other trial to take the slot")
        (other,) = jz.sql("SELECT DISTINCT trial_id FROM metrics WHERE trial_id<>?", tid)[0]
        assert jz.sql("SELECT state FROM trials WHERE id=?", other)[0][0] == "running"
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "suspended"
        # a suspended trial takes no parameter changes
        p = jz.run("trial", "set", str(tid), "lr=0.1")
        assert p.returncode == 1 and "suspended" in p.stderr
        # give the slot back: stop the other trial, resume the first
        jz.run("trial", "stop", str(other), check=0)
        p = jz.run("trial", "resume", str(tid), check=0)
        assert "restarting" in p.stdout
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish")
        (state, attempt) = jz.sql("SELECT state, attempt FROM trials WHERE id=?", tid)[0]
        assert state == "completed" and attempt == 1
        assert jz.sql("SELECT state FROM trials WHERE id=?", other)[0][0] == "stopped"
        # the second run continued from the checkpoint: its first step follows it
        (first,) = jz.sql("SELECT MIN(step) FROM metrics WHERE trial_id=? AND attempt=1", tid)[0]
        assert ckpt_step < first <= ckpt_step + 10
    finally:
        stop(ctl, disp)


def test_trial_set_timeout_when_the_trial_never_answers(jz):
    """`trial set --timeout S` fails (exit 1) when the trial does not
    acknowledge within S seconds; the change stays recorded; --no-wait
    returns at once; a bad --timeout is a usage error."""
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        # reports once through `jizhi report`, then never talks to the helper again
        spec = base_spec("deaf", ["sh", "-c", "jizhi report score=0 && exec sleep 60"],
                         trials=1, parallel=1)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running_trial(jz)
        p = jz.run("trial", "set", str(tid), "x=0.5", "--timeout", "1")
        assert p.returncode == 1, p.stdout + p.stderr
        assert "timeout" in p.stderr.lower() or "timed out" in p.stderr.lower(), p.stderr
        ev = json.loads(jz.run("study", "events", "deaf", "--json", check=0).stdout)
        sets = [e for e in ev if e.get("kind") == "instruction"
                and (e.get("detail") or {}).get("kind") == "set"]
        assert len(sets) == 1 and sets[0]["detail"]["value"] == 0.5, ev
        assert sets[0]["applied"] is None, ev  # recorded, never acknowledged
        p = jz.run("trial", "set", str(tid), "x=0.25", "--no-wait", check=0)
        assert "sent" in p.stdout
        p = jz.run("trial", "set", str(tid), "x=1", "--timeout", "0")
        assert p.returncode == 2 and "--timeout" in p.stderr
        jz.run("trial", "stop", str(tid), check=0)
    finally:
        stop(ctl, disp)
