"""Small things a new user hit at the command line (issue: new user, second
round, item 9): the dispatcher finds a local controller from --db like
every other command; ..."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import JIZHI, base_spec  # noqa: E402
from test_recovery import stop  # noqa: E402


def test_dispatcher_finds_a_local_controller_from_db(jz, tmp_path):
    db = os.path.join(jz.dir, "team.db")
    ctl = jz.popen("controller", "--db", db)
    procs = [ctl]
    try:
        jz.wait_for(lambda: os.path.exists(db + ".endpoint"), 30, "the endpoint file")
        spec = jz.write_spec(base_spec("from-db", ["sh", "-c", "jizhi report score=1"],
                                       trials=2))
        jz.run("study", "submit", spec, "--db", db, check=0)
        # started from another folder, with only --db
        other = tmp_path / "elsewhere"
        other.mkdir()
        disp = subprocess.Popen([JIZHI, "dispatcher", "--db", db, "--slots", "2"],
                                cwd=str(other), env=jz.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        procs.append(disp)
        jz.db = db
        jz.wait_for(lambda: jz.sql("SELECT count(*) FROM trials WHERE state='completed'")
                    == [(2,)], 60, "both trials completed")
    finally:
        stop(*procs)
    # no controller there: said, exit 1
    p = subprocess.run([JIZHI, "dispatcher", "--db", os.path.join(jz.dir, "none.db")],
                       capture_output=True, text=True, env=jz.env, timeout=30)
    assert p.returncode == 1 and "none.db.endpoint does not exist" in p.stderr, p.stderr
    p = subprocess.run([JIZHI, "dispatcher", "--db", db, "--controller", "ipc:///x"],
                       capture_output=True, text=True, env=jz.env, timeout=30)
    assert p.returncode == 2 and "choose one" in p.stderr


def test_try_column_and_retry_log_count_alike(jz):
    """A trial that fails once and passes on its retry: `trial list` shows
    TRY 2 and the controller's log says "retrying (try 2)"."""
    prog = ("if [ -f ran.$JIZHI_TRIAL ]; then jizhi report score=1; "
            "else touch ran.$JIZHI_TRIAL; exit 3; fi")
    spec = base_spec("retry-once", ["sh", "-c", prog], trials=1, parallel=1)
    spec["trial"]["retries"] = 1
    log = os.path.join(jz.dir, "ctl.log")
    ctl = jz.popen("controller", "--db", jz.db, "--log", log)
    disp = None
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        disp = jz.popen("dispatcher", "--slots", "1")
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials") == [("completed",)], 60,
                    "the retry to complete")
        p = jz.run("trial", "list", "retry-once", check=0)
    finally:
        stop(*[x for x in (disp, ctl) if x])
    rows = [l.split() for l in p.stdout.splitlines()[1:] if l.strip()]
    assert rows[0][1] == "completed" and rows[0][2] == "2", p.stdout
    assert "retrying (try 2)" in open(log).read()


def test_the_readmes_token_steers_what_the_cli_submitted(jz):
    """README: `TOKEN=$(jizhi token create)` is a token for the caller's
    login, the owner of what that user submits from the command line, so
    its set is accepted; a token for another user says at creation that it
    steers only that user's studies, and is refused (403)."""
    import getpass
    from test_web_api import live_spec, running
    from webutil import daemons_with_web, http
    ep, ctl, disp, url = daemons_with_web(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("mine")), check=0)
        tid = running(jz, 1)[0]
        p = jz.run("token", "create", "--db", jz.db, check=0)
        me = getpass.getuser()
        assert f"for {me} (role user)" in p.stderr, p.stderr
        st, j, _ = http("POST", url + f"/api/trials/{tid}/set", {"values": {"lr": 0.05}},
                        token=p.stdout.strip())
        assert st == 200, j
        other = "bob" if me != "bob" else "carol"
        p = jz.run("token", "create", other, "--db", jz.db, check=0)
        assert f"`jizhi token create {me}`" in p.stderr, p.stderr
        st, j, _ = http("POST", url + f"/api/trials/{tid}/set", {"values": {"lr": 0.05}},
                        token=p.stdout.strip())
        assert st == 403, j
    finally:
        stop(disp, ctl)


def test_run_keeps_the_daemons_log_out_of_its_progress(jz):
    """`jizhi run` prints progress and the result; the controller's and the
    dispatcher's log lines go to LOG-DIR/jizhi-run.log, named once."""
    spec = base_spec("quiet", ["sh", "-c", "echo noisy >&2; jizhi report score=1"],
                     trials=2)
    spec["trial"]["command"] = ["sh", "-c", "exit 3"]  # failures make the daemons log
    p = jz.run("run", jz.write_spec(spec), check=None)
    log = os.path.join(jz.dir, "jizhi-logs", "jizhi-run.log")
    assert "log: ./jizhi-logs/jizhi-run.log" in p.stderr or log in p.stderr, p.stderr
    for line in (p.stdout + p.stderr).splitlines():
        assert " warn " not in line and " info " not in line and " ctl:" not in line, line
    text = open(log).read()
    assert "ctl: serving" in text and "exit" in text


def test_run_summary_says_a_nan_objective_is_nan(jz):
    """Trials that report NaN are not 'infeasible' or silent: the summary
    says what they reported."""
    prog = ("import jizhi; t = jizhi.Trial(); t.report(1, score=float('nan')); t.close()")
    spec = base_spec("nanobj", ["python3", "-c", prog], trials=2, parallel=1)
    p = jz.run("run", jz.write_spec(spec))
    assert p.returncode == 1  # no result to give
    assert "no completed trial has a finite score: 2 reported nan or inf" in p.stdout, p.stdout
    assert "feasible" not in p.stdout


def test_a_bad_spec_file_is_named_once(jz):
    bad = os.path.join(jz.dir, "s.json")
    with open(bad, "w") as f:
        f.write('{"name": 3')
    for cmd in (("study", "submit", "s.json"), ("run", "s.json")):
        p = jz.run(*cmd)
        assert p.returncode == 1 and p.stderr.count("s.json") == 1, p.stderr
        assert "s.json: line 1, column" in p.stderr and "invalid JSON" in p.stderr
    p = jz.run("run", "missing.json")
    assert p.returncode == 1 and p.stderr.count("missing.json") == 1, p.stderr


def test_a_dead_controllers_socket_fails_at_once(jz):
    """A controller killed -9 leaves its ipc socket file and FILE.endpoint:
    nobody listens there (the connect is refused), so a command says so
    after 2 s instead of waiting out its timeout (review35 item 7)."""
    import socket
    path = os.path.join(jz.dir, "ctl.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)  # the file stays after close, with no listener
    s.close()
    with open(jz.db + ".endpoint", "w") as f:
        f.write(f"ipc://{path}\n")
    p = jz.run("study", "stop", "k9", timeout=60)
    assert p.returncode == 1, p.stderr
    assert f"no answer from the controller at ipc://{path} (cannot connect to {path}: " \
           "Connection refused); is it running?" in p.stderr, p.stderr
    assert "timeout" not in p.stderr, p.stderr


def test_a_command_waits_for_a_controller_restarting_on_its_socket(jz):
    """A crashed controller that restarts (systemd Restart=) binds the same
    ipc:// path again once its database is open: a command that meanwhile
    finds the socket file with nobody listening tries it again and gets its
    answer (review36 item 6: it failed at once)."""
    import json
    import socket
    import threading
    import time
    ctl = jz.popen("controller")
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        with open(jz.db + ".endpoint") as f:
            real = f.read().strip()[len("ipc://"):]
        path = os.path.join(jz.dir, "restart.sock")
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(path)  # the crashed one's file: connects are refused
        cmd = jz.popen("study", "list", "--json", "--controller", f"ipc://{path}",
                       stdout=subprocess.PIPE)
        time.sleep(0.5)
        # the controller is back: here a relay to the real one
        lsock.listen(1)
        lsock.settimeout(0.2)
        conn = None
        while conn is None and cmd.poll() is None:
            try:
                conn, _ = lsock.accept()
            except socket.timeout:
                pass
        if conn is not None:
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(real)

            def pump(a, b):
                try:
                    while data := a.recv(65536):
                        b.sendall(data)
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()
        out, err = cmd.communicate(timeout=60)
        assert cmd.returncode == 0 and json.loads(out) == [], (cmd.returncode, err)
        lsock.close()
    finally:
        stop(ctl)
