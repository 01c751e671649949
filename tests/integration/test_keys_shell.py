"""Sharing keys as a new user does it, in a shell: the README's forms (the
.pub file, the key in single quotes) work even when a Z85 key holds shell
characters; a wrong server key fails with "rejected the CURVE handshake"
(not a 30 s "no answer"); an unlisted key is told the line to add to
authorized_keys, naming its own public key (or saying it has none)."""
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD  # noqa: E402
from test_auth import curve_controller, free_port, keygen, stop, write_keys  # noqa: E402

# characters that break an unquoted word of `sh -c` wherever they are in
# it: ( and ), a syntax error. Others need not: a glob that matches nothing
# stays as it is (a key with only * ! [ { worked unquoted), a key ending in
# & or starting with > leaves JIZHI_SERVER_KEY empty, and the client then
# falls back to $JIZHI_HOME/controller.pub, the right key (both passed)
SHELLY = set("()")


def shell_key(jz, name):
    """A key pair whose public key holds a character the shell treats
    specially (most do; retried until one does)."""
    for _ in range(50):
        pub = jz.run("keygen", "--name", name, "--force", check=0).stdout.strip()
        if set(pub) & SHELLY:
            return pub
    raise AssertionError("no Z85 key with a shell character in 50 tries")


def sh(jz, line, timeout=25):
    env = dict(jz.env, PATH=os.path.join(BUILD, "bin") + os.pathsep + jz.env["PATH"])
    env.pop("JIZHI_KEY", None)
    try:
        return subprocess.run(["sh", "-c", line], cwd=jz.dir, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:  # say which line hung, with what it printed
        raise AssertionError("sh -c %r: no end in %d s; stdout %r, stderr %r"
                             % (line, timeout, e.stdout, e.stderr))


def test_keys_in_a_shell(jz):
    spub = shell_key(jz, "controller")
    me = keygen(jz, "client")  # the operator's own key, KEYDIR/client.key
    ep = f"tcp://127.0.0.1:{free_port()}"
    home = jz.env["JIZHI_HOME"]
    write_keys(jz, [f"{me} op admin"])
    ctl = curve_controller(jz, ep)
    try:
        # the README's quoted form, in a real shell
        p = sh(jz, f"JIZHI_SERVER_KEY='{spub}' jizhi study list --controller {ep}")
        assert p.returncode == 0, p.stderr
        # unquoted, the shell breaks it (what the README used to show)
        bad = sh(jz, f"JIZHI_SERVER_KEY={spub} jizhi study list --controller {ep}")
        assert bad.returncode != 0 or bad.stderr
        # the .pub file form
        pubfile = os.path.join(home, "controller.pub")
        p = sh(jz, f"jizhi study list --controller {ep} --server-key {shlex.quote(pubfile)}")
        assert p.returncode == 0, p.stderr

        # a wrong server key: refused by the handshake, said so
        p = sh(jz, f"jizhi study list --controller {ep} --server-key '{me}'")
        assert p.returncode == 1
        assert "rejected the CURVE handshake" in p.stderr and "no answer" not in p.stderr
        assert "--server-key FILE" in p.stderr

        # an unlisted key: the line to add, with this client's public key
        other = keygen(jz, "other")
        p = sh(jz, f"JIZHI_KEY={shlex.quote(os.path.join(home, 'other.key'))} "
                   f"jizhi study list --controller {ep} --server-key {shlex.quote(pubfile)}")
        assert p.returncode == 1 and "unknown key" in p.stderr
        assert f"'{other} USER ROLE'" in p.stderr and "role admin" in p.stderr
        # no key pair at all: told to make one
        p = sh(jz, f"JIZHI_KEY=anonymous jizhi study list --controller {ep} "
                   f"--server-key {shlex.quote(pubfile)}")
        assert p.returncode == 1 and "run `jizhi keygen`" in p.stderr
    finally:
        stop(ctl)
