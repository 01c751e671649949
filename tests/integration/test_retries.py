"""`retries` counts the attempts that failed (docs/spec.md), not every new
attempt: a trial paused with --release and resumed, or run again by its
study's stop and resume, still has its retry for its first real failure
(review37 item 3), and the count is kept by a controller killed and
started again. TRY stays the attempt number."""
import json
import os
import signal

from conftest import PROGS, base_spec
from test_control import daemons, running_trial
from test_recovery import kill9_and_restart, stop


def ckpt_spec(jz, name):
    env = {"STEPS": "100000", "ACK_LOG": os.path.join(jz.dir, "acks")}
    return base_spec(name, ["python3", os.path.join(PROGS, "ckpt_trial.py")], trials=1,
                     parallel=1, retries=1, env=env)


def pid_of_attempt(jz, tid, attempt):
    """The pid of trial `tid`'s attempt `attempt`, once it runs."""
    def row():
        return jz.sql("SELECT attempt, state, pid FROM trials WHERE id=?", tid)[0]
    jz.wait_for(lambda: row()[:2] == (attempt, "running") and row()[2], 60,
                f"trial {tid}'s attempt {attempt} to run")
    return row()[2]


def kill9_twice(jz, tid, attempt, between=None):
    """kill -9 of attempt `attempt`: it runs again as the next attempt,
    its one failure counted; kill -9 of that one fails the trial."""
    os.kill(pid_of_attempt(jz, tid, attempt), signal.SIGKILL)
    pid = pid_of_attempt(jz, tid, attempt + 1)
    assert jz.sql("SELECT failures FROM trials WHERE id=?", tid) == [(1,)]
    if between:
        between()
        pid = pid_of_attempt(jz, tid, attempt + 1)
    os.kill(pid, signal.SIGKILL)
    jz.wait_trial_state(tid, "failed", 30)
    (attempt_now, failures, reason) = jz.sql(
        "SELECT attempt, failures, reason FROM trials WHERE id=?", tid)[0]
    assert (attempt_now, failures) == (attempt + 1, 2)
    assert reason.startswith("killed by signal 9"), reason
    retries = jz.sql("SELECT COUNT(*) FROM events WHERE kind='retry' AND trial_id=? AND "
                     "json_extract(detail, '$.reason') LIKE 'killed by signal 9%'", tid)
    assert retries == [(1,)]
    shown = json.loads(jz.run("trial", "show", str(tid), "--json", check=0).stdout)
    assert (shown["attempt"], shown["failures"]) == (attempt + 1, 2), shown


def test_a_released_and_resumed_trial_keeps_its_retry(jz):
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        jz.run("study", "submit", jz.write_spec(ckpt_spec(jz, "rel")), check=0)
        tid = running_trial(jz)
        jz.wait_for(lambda: jz.sql("SELECT checkpoint_step FROM trials WHERE id=?",
                                   tid)[0][0], 60, "a first checkpoint")
        p = jz.run("trial", "pause", str(tid), "--release", check=0)
        assert f"trial {tid}: released" in p.stdout, p.stdout + p.stderr
        jz.wait_trial_state(tid, "suspended", 30)
        jz.run("trial", "resume", str(tid), check=0)
        kill9_twice(jz, tid, 1)
    finally:
        stop(ctl, disp)


def test_a_study_stop_and_resume_uses_no_retry_and_a_restart_keeps_the_count(jz):
    ep, ctl, disp = daemons(jz, slots="1")
    procs = [ctl, disp]
    try:
        jz.run("study", "submit", jz.write_spec(ckpt_spec(jz, "sr")), check=0)
        tid = running_trial(jz)
        jz.run("study", "stop", "sr", check=0)
        jz.wait_trial_state(tid, "stopped", 30)
        jz.run("study", "resume", "sr", check=0)

        def restart():
            procs[0] = kill9_and_restart(jz, procs[0], ep)

        kill9_twice(jz, tid, 1, between=restart)
    finally:
        stop(*procs)
