"""The `jizhi` front (cli/main.c built with CLI_FRONT): the trial and report
commands run in a process that loads no GSL, OpenBLAS, curses or libzmq
(half of a `trial set` process's time went to loading them and to OpenBLAS's
thread, then to libzmq's threads: docs/bench.md); every other command, and
any request to a tcp:// endpoint, is handed to jizhi-core beside it."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import BUILD, JIZHI

CORE = os.path.join(BUILD, "bin", "jizhi-core")


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    return [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]


def test_front_loads_no_numerics_curses_or_libzmq():
    # ipc:// through common/zmtp.c, tcp:// by jizhi-core, `report` loads
    # libjizhi when it runs: the front needs SQLite and jansson only
    front = needed(JIZHI)
    assert any(n.startswith("libsqlite3") for n in front), front
    assert any(n.startswith("libjansson") for n in front), front
    heavy = [n for n in front if n.startswith(("libgsl", "libopenblas", "libncurses", "libmpi",
                                               "libdnnl", "libgomp", "libzmq", "libsodium",
                                               "libjizhi", "libstdc++"))]
    assert heavy == [], heavy
    core = needed(CORE)
    assert any(n.startswith("libopenblas") for n in core), core
    assert any(n.startswith("libzmq") for n in core), core


def test_front_hands_other_commands_to_the_core(jz):
    for args in (["keygen", "--help"], ["study", "--help"], ["queue", "--help"]):
        a = jz.run(*args)
        b = subprocess.run([CORE, *args], cwd=jz.dir, env=jz.env, capture_output=True,
                           text=True, timeout=60)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), args
    # a core command's errors and exit status come through unchanged
    p = jz.run("study", "list", "--db", os.path.join(jz.dir, "none.db"))
    assert p.returncode == 1 and "none.db" in p.stderr, p.stderr


def test_front_without_the_core_says_so(jz, tmp_path):
    lone = tmp_path / "bin"
    lone.mkdir()
    shutil.copy(JIZHI, lone / "jizhi")
    p = subprocess.run([str(lone / "jizhi"), "study", "list"], cwd=jz.dir, env=jz.env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "cannot run %s/jizhi-core" % lone in p.stderr and "jizhi study" in p.stderr, \
        p.stderr
    # the front's own commands still run: a usage error is its own
    p = subprocess.run([str(lone / "jizhi"), "trial", "list"], cwd=jz.dir, env=jz.env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "expected STUDY" in p.stderr, p.stderr
    # a tcp:// request needs the core: one line saying so, not a second one
    # blaming the controller
    p = subprocess.run([str(lone / "jizhi"), "trial", "set", "1", "lr=0.1", "--no-wait",
                        "--controller", "tcp://127.0.0.1:9"], cwd=jz.dir, env=jz.env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "cannot run %s/jizhi-core" % lone in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    # `report` loads libjizhi from ../lib beside it (here: none), else by its
    # soname from the system's path
    system = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True,
                            text=True).stdout
    if "libjizhi.so" not in system:
        p = subprocess.run([str(lone / "jizhi"), "report", "loss=1"], cwd=jz.dir,
                           env=jz.env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, p.stderr
        assert "cannot load the trial helper library libjizhi.so." in p.stderr, p.stderr


def test_trial_set_over_ipc_starts_no_thread(jz):
    """Over ipc:// the front speaks ZMTP on its own thread (common/zmtp.c):
    no libzmq context, so no I/O or reaper thread to hand the request to
    and wait for on a busy machine. The answer is the controller's own."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("strace is not installed (apt-get install strace)")
    rt = tempfile.mkdtemp(prefix="jzrt-")  # short: ipc paths are limited to 107 bytes
    jz.env["XDG_RUNTIME_DIR"] = rt
    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        assert open(jz.db + ".endpoint").read().startswith("ipc://")
        trace = os.path.join(jz.dir, "clone.trace")
        p = subprocess.run([strace, "-f", "-qq", "-e", "trace=clone,clone3", "-o", trace,
                            JIZHI, "trial", "set", "999", "lr=0.1", "--no-wait", "--force"],
                           cwd=jz.dir, env=jz.env, capture_output=True, text=True,
                           timeout=60)
        if p.returncode != 1 and "ptrace" in p.stderr:
            pytest.skip("strace cannot trace here: " + p.stderr.strip()[:200])
        # the controller's refusal, through the socket: exit 1, its message
        assert p.returncode == 1, p.stderr
        assert "999" in p.stderr and "no answer" not in p.stderr, p.stderr
        calls = [l for l in open(trace) if "clone" in l]
        assert calls == [], calls
        # the same request through jizhi-core gets the same answer
        q = subprocess.run([CORE, "trial", "set", "999", "lr=0.1", "--no-wait", "--force"],
                           cwd=jz.dir, env=jz.env, capture_output=True, text=True,
                           timeout=60)
        assert (q.returncode, q.stderr) == (p.returncode, p.stderr)
    finally:
        ctl.terminate()
        ctl.wait(timeout=30)
        shutil.rmtree(rt, ignore_errors=True)


def test_front_hands_tcp_requests_to_the_core(jz):
    """The front links no libzmq: a request to a tcp:// endpoint runs the
    whole command in jizhi-core, with the same message and exit status."""
    env = dict(jz.env, JIZHI_SERVER_KEY="not-a-key")
    args = ["trial", "set", "1", "lr=0.1", "--no-wait", "--controller", "tcp://127.0.0.1:9"]
    a = subprocess.run([JIZHI, *args], cwd=jz.dir, env=env, capture_output=True, text=True,
                       timeout=60)
    b = subprocess.run([CORE, *args], cwd=jz.dir, env=env, capture_output=True, text=True,
                       timeout=60)
    assert a.returncode == 1 and "JIZHI_SERVER_KEY" in a.stderr, a.stderr
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)
    # --server-key given on the command line reaches the core too, and a bad
    # key is blamed on the flag, not on JIZHI_SERVER_KEY (review35 item 10a)
    a = subprocess.run([JIZHI, *args, "--server-key", "not-a-key"], cwd=jz.dir, env=jz.env,
                       capture_output=True, text=True, timeout=60)
    b = subprocess.run([CORE, *args, "--server-key", "not-a-key"], cwd=jz.dir, env=jz.env,
                       capture_output=True, text=True, timeout=60)
    assert a.returncode == 1 and "jizhi: --server-key: not-a-key: not a public key" \
        in a.stderr and "JIZHI_SERVER_KEY:" not in a.stderr, a.stderr
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)
    # a file given as the flag, as the variable, and the flag again in a
    # command that inherits the variable's origin from no one
    with open(os.path.join(jz.dir, "k.pub"), "w") as f:
        f.write("garbage\n")
    for extra, env, blamed in ((["--server-key", "k.pub"], jz.env, "--server-key"),
                               ([], dict(jz.env, JIZHI_SERVER_KEY="k.pub"), "JIZHI_SERVER_KEY"),
                               ([], dict(jz.env, JIZHI_SERVER_KEY="k.pub",
                                         JIZHI_SERVER_KEY_FROM="--server-key"),
                                "JIZHI_SERVER_KEY")):
        p = subprocess.run([JIZHI, "study", "list", "--controller", "tcp://127.0.0.1:9",
                            *extra], cwd=jz.dir, env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 1 and f"jizhi: {blamed}: k.pub: not a public key" \
            in p.stderr, (extra, p.stderr)
