"""Issue 36, the dispatcher's side, tried as an attacker would, each as a
separate client against real daemons:

- over tcp:// a dispatcher, the CLI and a trial without the controller's
  public key never fall back to plain TCP: whoever answers a plain socket
  (here an --insecure controller standing in for one on the path) gets no
  register, no heartbeat and runs nothing through it; the refusal says how
  to get the key; --insecure is the explicit way to plain TCP;
- a dispatcher running as root for a tcp:// controller warns (stderr and
  its log), and says in --help that trials run as its user;
- trial logs are 0600 and the log and checkpoint directories 0700, the
  helper's checkpoint directory too, whatever the umask lets through."""
import os
import stat
import subprocess
import time

import pytest

from conftest import JIZHI, base_spec
from test_auth import free_port
from test_recovery import stop


def insecure_controller(jz, ep):
    """A plain-TCP controller: what a keyless client would reach, whoever
    runs it. Its own clients below say --insecure (or not) themselves."""
    ctl = jz.popen("controller", "--db", jz.db, "--bind", ep, "--insecure", "--log",
                   os.path.join(jz.dir, "controller.log"))
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
    return ctl


def run_env(jz, **extra):
    env = dict(jz.env)
    env.pop("JIZHI_SERVER_KEY", None)
    env.update(extra)
    return env


def test_dispatcher_without_server_key_is_refused_and_runs_nothing(jz):
    ep = f"tcp://127.0.0.1:{free_port()}"
    marker = os.path.join(jz.dir, "ran")
    ctl = insecure_controller(jz, ep)
    disp = None
    try:
        spec = base_spec("bait", ["sh", "-c", f"touch {marker}; jizhi report score=1"],
                         trials=1, parallel=1)
        assert jz.run("study", "submit", jz.write_spec(spec), "--insecure").returncode == 0
        # no key, no --insecure: refused before it connects, with the way out
        p = subprocess.run([JIZHI, "dispatcher", "--controller", ep, "--name", "rogue",
                            "--log-dir", os.path.join(jz.dir, "logs")], cwd=jz.dir,
                           env=run_env(jz), capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, p.stderr
        assert "no server key" in p.stderr and ep in p.stderr, p.stderr
        assert "--server-key" in p.stderr and "JIZHI_SERVER_KEY" in p.stderr
        assert "jizhi keygen --name controller" in p.stderr and "--insecure" in p.stderr
        # a key that is not a key is no way around it
        p = subprocess.run([JIZHI, "dispatcher", "--controller", ep, "--server-key",
                            "not-a-key"], cwd=jz.dir, env=run_env(jz),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and "not a public key" in p.stderr, p.stderr
        p = subprocess.run([JIZHI, "dispatcher", "--controller", ep, "--insecure",
                            "--server-key", "x"], cwd=jz.dir, env=run_env(jz),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "choose one" in p.stderr, p.stderr
        time.sleep(1)
        assert jz.sql("SELECT COUNT(*) FROM dispatchers") == [(0,)]
        assert jz.sql("SELECT COUNT(*) FROM trials WHERE dispatcher IS NOT NULL "
                      "OR started IS NOT NULL") == [(0,)]
        assert not os.path.exists(marker)
        assert not os.path.exists(os.path.join(jz.dir, "logs"))
        # the same dispatcher told --insecure runs it: the test can tell
        disp = subprocess.Popen([JIZHI, "dispatcher", "--controller", ep, "--insecure",
                                 "--name", "m1", "--log-dir", os.path.join(jz.dir, "logs")],
                                cwd=jz.dir, env=run_env(jz), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the study to finish")
        assert os.path.exists(marker)
    finally:
        stop(*(p for p in (disp, ctl) if p))


def test_cli_without_server_key_is_refused(jz):
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = insecure_controller(jz, ep)
    try:
        spec = jz.write_spec(base_spec("nokey", ["true"], trials=1))
        for args in (["study", "list", "--controller", ep],
                     ["study", "submit", spec, "--controller", ep],
                     ["queue", "--controller", ep]):
            p = subprocess.run([JIZHI, *args], cwd=jz.dir, env=run_env(jz),
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 1, (args, p.stderr)
            assert "no server key" in p.stderr and "--insecure" in p.stderr, p.stderr
        assert jz.sql("SELECT COUNT(*) FROM studies") == [(0,)]
        # the word is the controller's: --insecure (or JIZHI_SERVER_KEY=none)
        p = subprocess.run([JIZHI, "study", "submit", spec, "--controller", ep,
                            "--insecure"], cwd=jz.dir, env=run_env(jz),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        p = subprocess.run([JIZHI, "study", "list", "--controller", ep], cwd=jz.dir,
                           env=run_env(jz, JIZHI_SERVER_KEY="none"), capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and "nokey" in p.stdout, p.stderr
        p = subprocess.run([JIZHI, "study", "list", "--controller", ep, "--insecure",
                            "--server-key", "x"], cwd=jz.dir, env=run_env(jz),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "choose one" in p.stderr, p.stderr
    finally:
        stop(ctl)


def test_dispatcher_help_states_the_trust_model(jz):
    out = jz.run("dispatcher", "--help", check=0).stdout
    assert "runs as the user who runs this dispatcher" in out
    assert "never as root" in out and "--insecure" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="the warning is for root")
def test_root_dispatcher_on_tcp_warns(jz):
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = insecure_controller(jz, ep)
    log = os.path.join(jz.dir, "disp.log")
    disp = subprocess.Popen([JIZHI, "dispatcher", "--controller", ep, "--insecure",
                             "--name", "m1", "--log", log, "--log-dir",
                             os.path.join(jz.dir, "logs")], cwd=jz.dir, env=run_env(jz),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM dispatchers")[0][0] == 1, 30,
                    "the dispatcher to register")
    finally:
        stop(disp, ctl)
    err = disp.stderr.read()
    assert "WARNING: running as root" in err and ep in err, err
    assert "WARNING: running as root" in open(log).read()
    # over ipc:// (one machine, the controller's own socket) it does not
    ipc = f"ipc://{jz.dir}/c.sock"
    db2 = os.path.join(jz.dir, "two.db")
    ctl = jz.popen("controller", "--db", db2, "--bind", ipc)
    jz.wait_for(lambda: os.path.exists(db2 + ".endpoint"), 30, "the endpoint file")
    disp = jz.popen("dispatcher", "--controller", ipc, "--name", "m2", "--log-dir",
                    os.path.join(jz.dir, "logs2"))
    try:
        time.sleep(1.5)
        assert disp.poll() is None
    finally:
        stop(disp, ctl)
    assert "running as root" not in disp.stderr.read()


CKPT_TRIAL = """
import os, jizhi
t = jizhi.Trial()
d = t.checkpoint_dir
open(os.path.join(d, "w.bin"), "w").write("x")
t.report(1, score=1.0)
t.close()
"""


def test_trial_logs_and_checkpoints_are_private(jz):
    prog = os.path.join(jz.dir, "ck.py")
    with open(prog, "w") as f:
        f.write(CKPT_TRIAL)
    logs = os.path.join(jz.dir, "logs")
    given = os.path.join(jz.dir, "given", "ck")
    spec = base_spec("priv", ["python3", prog], trials=1, parallel=1,
                     env={"PYTHONPATH": jz.env["PYTHONPATH"]})
    # a folder only the helper creates (the trial chose it; the dispatcher did not)
    spec2 = base_spec("priv2", ["env", f"JIZHI_CHECKPOINT_DIR={given}", "python3", prog],
                      trials=1, parallel=1, env={"PYTHONPATH": jz.env["PYTHONPATH"]})
    old = os.umask(0o022)  # what the daemons inherit: files 0644, folders 0755
    try:
        ctl = jz.popen("controller", "--db", jz.db)
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        disp = jz.popen("dispatcher", "--name", "m1", "--log-dir", logs)
    finally:
        os.umask(old)
    try:
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.run("study", "submit", jz.write_spec(spec2, "s2.json"), check=0)
        jz.wait_for(lambda: [r[0] for r in jz.sql("SELECT state FROM studies")] ==
                    ["finished", "finished"], 60, "both studies to finish")
    finally:
        stop(disp, ctl)
    assert jz.sql("SELECT state FROM trials ORDER BY id") == [("completed",), ("completed",)]
    trial = jz.sql("SELECT id FROM trials WHERE study_id=(SELECT id FROM studies "
                   "WHERE name='priv')")[0][0]
    # where the controller puts checkpoints (beside the database); the
    # dispatcher creates them
    ck = os.path.join(jz.dir, "jizhi-checkpoints")
    want = {logs: 0o700, f"{logs}/priv": 0o700,
            f"{logs}/priv/trial-{trial}.0.out": 0o600,
            f"{logs}/priv/trial-{trial}.0.err": 0o600,
            ck: 0o700, f"{ck}/priv": 0o700, f"{ck}/priv/trial-{trial}": 0o700,
            os.path.dirname(given): 0o700, given: 0o700}
    got = {p: stat.S_IMODE(os.stat(p).st_mode) for p in want}
    assert got == want
    assert os.path.exists(f"{ck}/priv/trial-{trial}/w.bin")
    assert os.path.exists(os.path.join(given, "w.bin"))
