"""Shared fixtures for the integration tests: the built binaries, a
temporary working directory per test, and helpers to run `jizhi` and read
its SQLite database."""
import json
import os
import sqlite3
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JIZHI_BUILD", os.path.join(ROOT, "build"))
JIZHI = os.path.join(BUILD, "bin", "jizhi")
PROGS = os.path.join(ROOT, "tests", "integration", "progs")


def env_for_trials():
    env = dict(os.environ)
    env["PATH"] = os.path.join(BUILD, "bin") + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.path.join(ROOT, "trial_helper", "python")
    # JIZHI_HELPER_LIB: the sanitizer pass runs daemons from build-san/ but
    # Python trials on the plain library (an ASan library cannot load into
    # a Python built without it)
    env["JIZHI_LIB"] = os.environ.get("JIZHI_HELPER_LIB") or os.path.join(BUILD, "lib",
                                                                         "libjizhi.so")
    env.pop("JIZHI_DB", None)
    env.pop("JIZHI_CONTROLLER", None)
    for k in ("JIZHI_TRIAL", "JIZHI_TOKEN", "JIZHI_ENDPOINT", "JIZHI_PARAMS", "JIZHI_KEY",
              "JIZHI_SERVER_KEY", "XDG_RUNTIME_DIR"):
        env.pop(k, None)
    return env


class Jizhi:
    """Runs jizhi commands in a per-test directory."""

    def __init__(self, tmp):
        self.dir = str(tmp)
        self.db = os.path.join(self.dir, "jizhi.db")
        self.env = env_for_trials()
        # keys and default sockets of this test only, never ~/.config/jizhi
        self.env["JIZHI_HOME"] = os.path.join(self.dir, "home")

    def run(self, *args, timeout=120, check=None):
        p = subprocess.run([JIZHI, *args], cwd=self.dir, env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        if check is not None:
            assert p.returncode == check, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
        return p

    def popen(self, *args, **kw):
        return subprocess.Popen([JIZHI, *args], cwd=self.dir, env=self.env,
                                stdout=kw.pop("stdout", subprocess.DEVNULL),
                                stderr=kw.pop("stderr", subprocess.PIPE), text=True, **kw)

    def write_spec(self, spec, name="spec.json"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def sql(self, query, *params):
        con = sqlite3.connect(self.db, timeout=10)
        try:
            return con.execute(query, params).fetchall()
        finally:
            con.close()

    def wait_for(self, cond, timeout=60, what="condition"):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if cond():
                    return
            except (sqlite3.OperationalError, IndexError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def wait_trial_state(self, tid, state, timeout=60, what=None):
        """Waits until trial `tid`'s row in the database is in `state`."""
        self.wait_for(lambda: self.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == state,
                      timeout, what or f"trial {tid} to be {state}")


@pytest.fixture
def jz(tmp_path):
    assert os.access(JIZHI, os.X_OK), f"build first: {JIZHI} is missing"
    return Jizhi(tmp_path)


def base_spec(name, command, trials=4, parallel=2, **trial):
    spec = {
        "name": name,
        "objective": {"metric": "score", "mode": "max"},
        "scheduler": {"type": "random", "seed": 3},
        "budget": {"trials": trials, "parallel": parallel},
        "space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "trial": {"command": command, "timeout_s": 60, "retries": 0},
    }
    spec["trial"].update(trial)
    return spec
