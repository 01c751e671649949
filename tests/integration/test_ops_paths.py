"""Paths that had no test: a study's wall-clock budget (budget.time_s) and
the daemons' `--log syslog`."""
import json
import os
import socket
import subprocess

import pytest

from conftest import JIZHI, PROGS, base_spec
from test_recovery import stop


def test_time_budget_stops_running_trials_and_starts_no_more(jz):
    """budget.time_s 2: trials with x < 0 finish in a few steps, the others
    would run for minutes (live_trial.py obeys stop): those are stopped once
    the budget is used up, with that reason, no trial starts after it, and
    `jizhi run` ends with the study finished and its best."""
    cmd = ["sh", "-c", "case $1 in -*) export STEPS=3;; esac; exec python3 "
           + os.path.join(PROGS, "live_trial.py"), "sh", "{x}"]
    spec = base_spec("timed", cmd, trials=40, parallel=2, env={"STEPS": "100000"})
    spec["budget"]["time_s"] = 2
    p = jz.run("run", jz.write_spec(spec), timeout=120)
    assert "study timed: finished" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    rows = jz.sql("SELECT t.state, t.reason, p.value, t.created FROM trials t JOIN params p "
                  "ON p.trial_id=t.id AND p.name='x' ORDER BY t.id")
    (created,) = jz.sql("SELECT created FROM studies")[0]
    # seed 3 draws x = -0.58, 0.59, -0.67, -0.98, 0.26, ...: the positive ones
    # hold their slots until the budget stops them; the negative ones finish
    # (or, on a slow machine, are stopped by the budget too)
    assert len(rows) < 40 and sum(float(x) > 0 for _, _, x, _ in rows) == 2, rows
    for state, reason, x, t_created in rows:
        if float(x) > 0 or state != "completed":
            assert (state, reason) == ("stopped", "study time budget used up"), rows
        assert t_created <= created + 2, rows  # none started after the budget
    stops = jz.sql("SELECT time, detail FROM events WHERE kind='instruction'")
    assert len(stops) == sum(s == "stopped" for s, _, _, _ in rows)
    for t, d in stops:
        assert json.loads(d) == {"kind": "stop", "reason": "study time budget used up"}
        assert t >= created + 2  # not before the budget was used up
    assert jz.sql("SELECT state FROM studies") == [("finished",)]


def no_syslog_here(reason):
    pytest.skip(f"--log syslog: {reason}")


@pytest.fixture
def syslog_ns(tmp_path):
    """Runs commands in a mount namespace whose /dev/log is a datagram
    socket of this test (root, unshare -m): yields (prefix, socket)."""
    if os.geteuid() != 0:
        no_syslog_here("needs root for a private /dev/log (unshare -m)")
    real, fake = tmp_path / "realdev", tmp_path / "fakedev"
    real.mkdir()
    fake.mkdir()
    for e in os.listdir("/dev"):
        if e != "log":
            os.symlink(real / e, fake / e)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(fake / "log"))
    sock.settimeout(30)
    inner = f"mount --bind /dev {real} && mount --bind {fake} /dev && exec \"$@\""
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh"]
    probe = subprocess.run(prefix + ["test", "-S", "/dev/log"], capture_output=True,
                           text=True, timeout=30)
    if probe.returncode != 0:
        sock.close()
        no_syslog_here(f"cannot make a private /dev/log here: {probe.stderr.strip()}")
    yield prefix, sock
    sock.close()


def test_log_syslog_sends_the_daemons_messages_to_syslog(jz, syslog_ns):
    prefix, sock = syslog_ns
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = subprocess.Popen(prefix + [JIZHI, "controller", "--db", jz.db, "--bind", ep,
                                     "--log", "syslog"], cwd=jz.dir, env=jz.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    disp = subprocess.Popen(prefix + [JIZHI, "dispatcher", "--controller", ep, "--slots", "1",
                                      "--name", "sys1", "--log", "syslog", "--log-dir",
                                      os.path.join(jz.dir, "logs")],
                            cwd=jz.dir, env=jz.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    got = []
    try:
        # both daemons' start lines arrive as syslog datagrams, with their pid
        # (unshare and sh exec jizhi: the pid is the daemon's)
        while not (any(f"jizhi[{ctl.pid}]: " in m and "serving" in m for m in got) and
                   any(f"jizhi[{disp.pid}]: " in m and "sys1" in m for m in got)):
            got.append(sock.recv(65536).decode(errors="replace"))
    finally:
        stop(ctl, disp)
    _, ctl_err = ctl.communicate(timeout=30)
    _, disp_err = disp.communicate(timeout=30)
    text = "\n".join(got)
    assert "jizhi" in text and "serving" in text, text
    # a datagram is "<PRI>TIMESTAMP jizhi[PID]: message", facility daemon (3)
    serving = next(m for m in got if "serving" in m)
    pri = int(serving[1:serving.index(">")])
    assert pri // 8 == 3 and pri % 8 == 6, serving  # daemon.info
    # and nothing of it on stderr
    assert "serving" not in ctl_err and "sys1" not in disp_err, (ctl_err, disp_err)


def test_log_target_that_cannot_be_opened_is_refused(jz):
    p = jz.run("controller", "--db", jz.db, "--log", os.path.join(jz.dir, "no", "such", "x.log"))
    assert p.returncode in (1, 2) and "x.log" in p.stderr, p.stderr
    assert not os.path.exists(jz.db)
