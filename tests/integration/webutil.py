"""Helpers for the web tests: start `jizhi serve` (or a daemon with
--http) on a free port of 127.0.0.1, and make HTTP requests with urllib."""
import json
import os
import select
import subprocess
import time
import urllib.error
import urllib.request

from test_recovery import start_dispatcher



def wait_url(proc, timeout=30):
    """Reads the daemon's stderr until it prints its dashboard address."""
    end = time.time() + timeout
    buf = ""
    while time.time() < end:
        r, _, _ = select.select([proc.stderr], [], [], 0.5)
        if r:
            line = proc.stderr.readline()
            if not line:
                break
            buf += line
            if "web dashboard at " in line:
                return line.split("web dashboard at ", 1)[1].strip().rstrip("/")
        if proc.poll() is not None:
            break
    raise AssertionError(f"no dashboard address printed; stderr:\n{buf}")


# JIZHI_WEB_BIN runs the web server (serve, controller --http) from another
# build, e.g. build-san/bin/jizhi to check it under AddressSanitizer.
WEB_BIN = os.environ.get("JIZHI_WEB_BIN")


def web_popen(jz, *args):
    if not WEB_BIN:
        return jz.popen(*args)
    return subprocess.Popen([WEB_BIN, *args], cwd=jz.dir, env=jz.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def serve(jz, *extra):
    p = web_popen(jz, "serve", "--db", jz.db, "--http", "127.0.0.1:0", *extra)
    return p, wait_url(p)


def daemons_with_web(jz, slots="2"):
    """A controller with --http and a dispatcher."""
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = web_popen(jz, "controller", "--db", jz.db, "--bind", ep, "--lost-timeout", "20",
                    "--log", os.path.join(jz.dir, "controller.log"), "--http", "127.0.0.1:0")
    url = wait_url(ctl)
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
    disp = start_dispatcher(jz, ep, slots)
    return ep, ctl, disp, url


def http(method, url, body=None, token=None, ctype="application/json", headers=None,
         raw=False, timeout=60):
    """Returns (status, decoded JSON or bytes, response headers)."""
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None or method == "POST":
        if ctype:
            req.add_header("Content-Type", ctype)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    if method == "POST" and data is None:
        req.data = b""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            payload = r.read()
            return r.status, payload if raw else json.loads(payload), dict(r.headers)
    except urllib.error.HTTPError as e:
        payload = e.read()
        try:
            return e.code, json.loads(payload), dict(e.headers)
        except ValueError:
            return e.code, payload, dict(e.headers)


def make_token(jz, user, role="user"):
    p = jz.run("token", "create", user, "--role", role, "--db", jz.db, check=0)
    return p.stdout.strip()
