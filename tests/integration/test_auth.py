"""Authentication over real daemons (docs/design.md, "Authentication"):
the default ipc:// socket in a private 0700 directory; tcp:// refused
without a server key, plain only with --insecure; CURVE over
tcp://127.0.0.1 with an authorized-keys file: an unknown key, a wrong
server key and a viewer are refused and nothing runs, a dispatcher key
runs trials, a user key cannot register a dispatcher, SIGHUP adds and
removes keys and a bad file keeps the old ones."""
import json
import os
import socket
import stat
import subprocess
import tempfile
import time

from conftest import JIZHI, base_spec
from test_recovery import stop


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(jz, name):
    p = jz.run("keygen", "--name", name, check=0)
    pub = p.stdout.strip()
    assert len(pub) == 40
    return pub


def as_key(jz, key, server_key=None):
    """An environment that speaks with KEY (a file name in the key dir)."""
    env = dict(jz.env)
    env["JIZHI_KEY"] = os.path.join(env["JIZHI_HOME"], key + ".key")
    if server_key:
        env["JIZHI_SERVER_KEY"] = server_key
    return env


def cli(jz, env, *args, timeout=60):
    return subprocess.run([JIZHI, *args], cwd=jz.dir, env=env, capture_output=True,
                          text=True, timeout=timeout)


def write_keys(jz, lines):
    path = os.path.join(jz.env["JIZHI_HOME"], "authorized_keys")
    with open(path, "w") as f:
        f.write("# key user role\n" + "".join(l + "\n" for l in lines))
    return path


def curve_controller(jz, ep):
    ctl = jz.popen("controller", "--db", jz.db, "--bind", ep, "--lost-timeout", "20",
                   "--log", os.path.join(jz.dir, "controller.log"))
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
    return ctl


def log_has(jz, text, timeout=10):
    path = os.path.join(jz.dir, "controller.log")
    jz.wait_for(lambda: text in open(path).read(), timeout, f"log line {text!r}")


def test_default_bind_is_ipc_in_a_private_directory(jz):
    rt = tempfile.mkdtemp(prefix="jzrt-")  # short: ipc paths are limited to 107 bytes
    jz.env["XDG_RUNTIME_DIR"] = rt
    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        ep = open(jz.db + ".endpoint").read().strip()
        assert ep.startswith(f"ipc://{rt}/jizhi/ctl-") and ep.endswith(".sock"), ep
        d = os.stat(os.path.join(rt, "jizhi"))
        assert stat.S_IMODE(d.st_mode) == 0o700 and d.st_uid == os.geteuid()
        assert stat.S_IMODE(os.stat(jz.db + ".endpoint").st_mode) == 0o600
        # the local user is the admin: submit and list through the socket
        jz.run("study", "submit", jz.write_spec(base_spec("local", ["true"])), check=0)
        assert "local" in jz.run("study", "list", check=0).stdout
    finally:
        stop(ctl)
    # a socket directory someone else could enter is refused
    os.chmod(os.path.join(rt, "jizhi"), 0o755)
    p = jz.run("controller", "--db", jz.db, timeout=30)
    assert p.returncode == 1 and "mode 0700" in p.stderr, p.stderr
    os.chmod(os.path.join(rt, "jizhi"), 0o700)


def test_tcp_needs_a_server_key_or_insecure(jz):
    ep = f"tcp://127.0.0.1:{free_port()}"
    p = jz.run("controller", "--db", jz.db, "--bind", ep, timeout=30)
    assert p.returncode == 1
    assert "needs a server key for CURVE" in p.stderr and "jizhi keygen" in p.stderr
    assert not os.path.exists(jz.db + ".endpoint")
    p = jz.run("controller", "--db", jz.db, "--insecure", timeout=30)
    assert p.returncode == 2 and "tcp://" in p.stderr
    ctl = jz.popen("controller", "--db", jz.db, "--bind", ep, "--insecure")
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        # the client says --insecure too: no silent fallback to plain TCP
        p = jz.run("study", "list", "--controller", ep)
        assert p.returncode == 1 and "no server key" in p.stderr, p.stderr
        assert jz.run("study", "list", "--controller", ep, "--insecure").returncode == 0
    finally:
        stop(ctl)
    assert "WARNING: --insecure" in ctl.stderr.read()


def test_curve_keys_roles_and_reload(jz):
    keygen(jz, "controller")
    admin, viewer, rogue, stranger = (keygen(jz, n) for n in
                                      ("admin", "viewer", "rogue", "stranger"))
    dkey = keygen(jz, "disp")
    write_keys(jz, [f"{admin} alice admin", f"{viewer} vic viewer",
                    f"{rogue} mallory user", f"{dkey} m1 dispatcher"])
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = curve_controller(jz, ep)
    procs = [ctl]
    spec = jz.write_spec(base_spec("s1", ["sh", "-c", "jizhi report score=1"], trials=2))
    try:
        # an unlisted key: refused, nothing stored
        p = cli(jz, as_key(jz, "stranger"), "study", "submit", spec, "--controller", ep)
        assert p.returncode == 1 and "unknown key" in p.stderr, p.stderr
        # a wrong server key: the controller drops the handshake, and the
        # client says so rather than waiting for an answer
        p = cli(jz, as_key(jz, "admin", server_key=admin), "study", "list",
                "--controller", ep)
        assert p.returncode == 1 and "rejected the CURVE handshake" in p.stderr, p.stderr
        assert "no answer" not in p.stderr
        # a viewer reads but cannot submit
        p = cli(jz, as_key(jz, "viewer"), "study", "submit", spec, "--controller", ep)
        assert p.returncode == 1 and "vic (role viewer) may not submit" in p.stderr
        assert cli(jz, as_key(jz, "viewer"), "study", "list", "--controller",
                   ep).returncode == 0
        assert jz.sql("SELECT count(*) FROM studies") == [(0,)]
        # a user key cannot be a dispatcher
        rd = subprocess.Popen([JIZHI, "dispatcher", "--controller", ep, "--name", "m1",
                               "--log-dir", os.path.join(jz.dir, "rlogs")], cwd=jz.dir,
                              env=as_key(jz, "rogue"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        procs.append(rd)
        log_has(jz, "refused register from mallory (user)")
        stop(rd)
        # the admin submits, the dispatcher's key runs the trials (which get
        # the server key from it and speak with their tokens)
        p = cli(jz, as_key(jz, "admin"), "study", "submit", spec, "--controller", ep)
        assert p.returncode == 0, p.stderr
        procs.append(jz.popen("dispatcher", "--controller", ep, "--name", "m1", "--key",
                              os.path.join(jz.env["JIZHI_HOME"], "disp.key"),
                              "--log-dir", os.path.join(jz.dir, "logs")))
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the study to finish")
        assert jz.sql("SELECT count(*) FROM trials WHERE state='completed'") == [(2,)]
        # SIGHUP: a new key works at once, a bad file keeps the old keys
        p = cli(jz, as_key(jz, "stranger"), "study", "list", "--controller", ep)
        assert p.returncode == 1 and "unknown key" in p.stderr
        write_keys(jz, [f"{admin} alice admin", f"{stranger} sam viewer"])
        ctl.send_signal(1)
        log_has(jz, "reloaded")
        assert cli(jz, as_key(jz, "stranger"), "study", "list", "--controller",
                   ep).returncode == 0
        path = write_keys(jz, [f"{admin} alice admin", "not-a-key bob user"])
        ctl.send_signal(1)
        log_has(jz, "line 3: \"not-a-key\" is not a public key")
        assert cli(jz, as_key(jz, "stranger"), "study", "list", "--controller",
                   ep).returncode == 0
        # removing a key takes its rights away from live connections too
        write_keys(jz, [f"{admin} alice admin"])
        ctl.send_signal(1)
        time.sleep(0.5)
        p = cli(jz, as_key(jz, "stranger"), "study", "list", "--controller", ep)
        assert p.returncode == 1 and "unknown key" in p.stderr
        assert path
    finally:
        stop(*procs)


def test_owners_roles_dispatcher_names_and_actors(jz):
    """User carol cannot stop or set bob's study, the admin can; a second
    dispatcher key cannot take the first one's name; events say who."""
    import json
    keygen(jz, "controller")
    keys = {n: keygen(jz, n) for n in ("alice", "bob", "carol", "d1", "d2")}
    write_keys(jz, [f"{keys['alice']} alice admin", f"{keys['bob']} bob user",
                    f"{keys['carol']} carol user", f"{keys['d1']} m1 dispatcher",
                    f"{keys['d2']} m2 dispatcher"])
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = curve_controller(jz, ep)
    procs = [ctl]
    home = jz.env["JIZHI_HOME"]
    try:
        procs.append(jz.popen("dispatcher", "--controller", ep, "--name", "m1", "--key",
                              os.path.join(home, "d1.key"), "--slots", "2",
                              "--log-dir", os.path.join(jz.dir, "logs")))
        spec = base_spec("b1", ["sh", "-c", "sleep 60"], trials=1, parallel=1)
        other = dict(spec, owner="carol")
        p = cli(jz, as_key(jz, "bob"), "study", "submit", jz.write_spec(other, "o.json"),
                "--controller", ep)
        assert p.returncode == 1 and "bob may not submit a study owned by" in p.stderr
        p = cli(jz, as_key(jz, "bob"), "study", "submit", jz.write_spec(spec),
                "--controller", ep)
        assert p.returncode == 0, p.stderr
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials")[0][0] == "running", 60,
                    "bob's trial running")
        tid = str(jz.sql("SELECT id FROM trials")[0][0])
        # another user: refused, nothing changes
        for args in (["study", "stop", "b1"], ["trial", "set", tid, "x=0.5"],
                     ["trial", "stop", tid], ["trial", "pause", tid]):
            p = cli(jz, as_key(jz, "carol"), *args, "--controller", ep)
            assert p.returncode == 1, (args, p.stderr)
            assert "carol may not steer study b1: it belongs to bob" in p.stderr
        assert jz.sql("SELECT state FROM studies") == [("running",)]
        assert jz.sql("SELECT state FROM trials") == [("running",)]
        # a second dispatcher key cannot take m1's name (its trial stays)
        rd = subprocess.Popen([JIZHI, "dispatcher", "--controller", ep, "--name", "m1",
                               "--log-dir", os.path.join(jz.dir, "rlogs")], cwd=jz.dir,
                              env=as_key(jz, "d2"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        procs.append(rd)
        log_has(jz, "refused register of dispatcher m1 from another identity")
        stop(rd)
        assert jz.sql("SELECT state, dispatcher FROM trials") == [("running", "m1")]
        # the admin may
        p = cli(jz, as_key(jz, "alice"), "study", "stop", "b1", "--controller", ep)
        assert p.returncode == 0, p.stderr
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] != "running", 60,
                    "the study to stop")
        ev = json.loads(cli(jz, as_key(jz, "bob"), "study", "events", "b1", "--json",
                            "--controller", ep).stdout)
        actors = {e["kind"]: e["actor"] for e in ev}
        assert actors.get("study_submitted") == "bob", ev
        assert actors.get("study_stopped") == "alice", ev
        out = cli(jz, as_key(jz, "bob"), "study", "events", "b1", "--controller", ep).stdout
        assert "cli:alice" in out and "cli:bob" in out, out
    finally:
        stop(*procs)


class SharedSocket:
    """A controller on an ipc:// socket every local user may reach (on
    purpose, for the tests of other uids), and `nobody` as a client of it.
    Needs root (the tests that use it skip without)."""

    def __init__(self, jz):
        import pwd
        self.jz, self.nobody = jz, pwd.getpwnam("nobody")
        sock_dir = tempfile.mkdtemp(prefix="jzpeer-")
        os.chmod(sock_dir, 0o755)
        self.ep = f"ipc://{sock_dir}/ctl.sock"
        self.ctl = jz.popen("controller", "--db", jz.db, "--bind", self.ep, "--log",
                            os.path.join(jz.dir, "controller.log"))
        self.dir = tempfile.mkdtemp(prefix="jzspec-")  # nobody's home and files
        os.chmod(self.dir, 0o755)
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        os.chmod(os.path.join(sock_dir, "ctl.sock"), 0o777)

    def write_json(self, name, obj):
        """A file nobody can read; returns its path."""
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(obj, f)
        os.chmod(path, 0o644)
        return path

    def as_nobody(self, *args):
        """Runs `jizhi ARGS --controller EP` as nobody."""
        env = dict(self.jz.env, HOME=self.dir, JIZHI_HOME=self.dir)
        uid, gid = self.nobody.pw_uid, self.nobody.pw_gid
        return subprocess.run([JIZHI, *args, "--controller", self.ep], cwd=self.dir, env=env,
                              capture_output=True, text=True, timeout=60,
                              preexec_fn=lambda: (os.setgid(gid), os.setuid(uid)))

    def stop(self):
        stop(self.ctl)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def rss_once_trimmed(pid, limit_kb, timeout=30):
    """The RSS once the controller has trimmed its memory (it does when its
    loop is idle after a large message): waits for the RSS to fall under
    limit_kb and returns it, or the last value after timeout."""
    end = time.monotonic() + timeout
    r = rss_kb(pid)
    while r >= limit_kb and time.monotonic() < end:
        time.sleep(0.05)
        r = rss_kb(pid)
    return r


def test_message_size_caps_keep_the_controller_small(jz):
    """8 concurrent messages at the 1 MiB cap (the costliest JSON to parse:
    an array of small numbers) and 8 of 3 MiB cost the controller little
    RSS; the large ones get a too_large reply and change nothing; over 4
    MiB the connection is dropped and the controller goes on."""
    import threading
    from zmtp import Dealer
    ep = f"ipc://{jz.dir}/c.sock"
    ctl = jz.popen("controller", "--db", jz.db, "--bind", ep)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        path = ep[len("ipc://"):]
        # at the cap: legal JSON, parsed, answered (unknown fields of a ping)
        legal = b'{"type":"ping","req":7,"x":[' + b"0," * 524000 + b'0]}'
        assert len(legal) <= 1024 * 1024
        big = b'{"type":"ping","req":8,"x":[' + b"0," * (1536 * 1024) + b'0]}'
        # warm up: one of each, then measure
        for body in (legal, big):
            d = Dealer(path)
            d.send(body)
            d.recv()
            d.close()
        before = rss_kb(ctl.pid)
        replies = []

        def one(body):
            d = Dealer(path)
            d.send(body)
            replies.append(json.loads(d.recv()))
            d.close()

        for body in (legal, big):
            ts = [threading.Thread(target=one, args=(body,)) for _ in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
        after = rss_once_trimmed(ctl.pid, before + 48 * 1024)
        oks = [r for r in replies if r["type"] == "ok"]
        too = [r for r in replies if r.get("code") == "too_large"]
        assert len(oks) == 8 and len(too) == 8, replies
        assert "over the 1048576-byte limit" in too[0]["message"]
        # 16 messages, 32 MiB of text: the controller keeps well under that
        print(f"controller RSS {before} kB before, {after} kB after 16 large messages")
        assert after - before < 48 * 1024, (before, after)
        # over the hard cap: dropped unread, the controller still answers
        d = Dealer(path)
        try:
            d.send(b'{"type":"ping","req":9,"x":"' + b"a" * (5 * 1024 * 1024) + b'"}')
            d.recv()
            raise AssertionError("a message over the hard cap was answered")
        except (BrokenPipeError, ConnectionError):
            pass  # the controller hung up
        d.close()
        assert jz.run("study", "list", "--controller", ep).returncode == 0
        assert rss_once_trimmed(ctl.pid, before + 48 * 1024) - before < 48 * 1024
        # the CLI refuses a request over the cap before sending it
        spec = base_spec("huge", ["true"])
        # (within the spec's limits: 10 000 values, but 1.1 MB of them)
        spec["space"] = {"c": {"type": "choice",
                               "values": [f"{i:0110d}" for i in range(10000)]}}
        p = jz.run("study", "submit", jz.write_spec(spec), "--controller", ep)
        assert p.returncode == 1 and "over the controller's limit" in p.stderr, p.stderr
        assert jz.sql("SELECT count(*) FROM studies") == [(0,)]
    finally:
        stop(ctl)


def test_other_unix_users_are_users_named_by_their_login(jz):
    """Over ipc the kernel tells the peer's uid: another uid is a `user`
    named after its login, owns what it submits and cannot steer the
    controller's user's studies."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("needs root to run a client as another uid")
    site = SharedSocket(jz)
    try:
        jz.run("study", "submit", jz.write_spec(base_spec("mine", ["sleep", "30"])), check=0)
        path = site.write_json("theirs.json", base_spec("theirs", ["true"]))
        p = site.as_nobody("study", "submit", path)
        assert p.returncode == 0, p.stderr
        p = site.as_nobody("study", "stop", "mine")
        assert p.returncode == 1 and "nobody may not steer study mine" in p.stderr, p.stderr
        assert site.as_nobody("study", "stop", "theirs").returncode == 0
        specs = dict(jz.sql("SELECT name, spec FROM studies"))
        assert json.loads(specs["theirs"]).get("owner") == "nobody"
        assert "owner" not in json.loads(specs["mine"])
        assert jz.sql("SELECT state FROM studies WHERE name='mine'") == [("running",)]
    finally:
        site.stop()
