"""The Python trial helper (trial_helper/python/jizhi) over libjizhi.

Standalone mode and environment errors run the package in a child
interpreter (both /usr/bin/python3 and the `python3` on PATH when they
differ). The connected test runs the C fake controller of
tests/test_jz_helper.c (`test_jz_helper --serve ENDPOINT N`), since pyzmq
is not a dependency, and a child Python trial against it.

Run: /usr/bin/python3 -m pytest tests/integration/test_helper_python.py
(needs `make build/lib/libjizhi.so build/tests/test_jz_helper`).
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import base_spec
from test_control import daemons, running_trial
from test_recovery import stop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JIZHI_BUILD", os.path.join(ROOT, "build"))
LIB = os.path.join(BUILD, "lib", "libjizhi.so")
FAKE = os.path.join(BUILD, "tests", "test_jz_helper")
PKG = os.path.join(ROOT, "trial_helper", "python")


def interpreters():
    found = [sys.executable]
    for cand in ("/usr/bin/python3", shutil.which("python3")):
        if cand and os.path.exists(cand) and os.path.realpath(cand) not in map(os.path.realpath, found):
            found.append(cand)
    return found


def child_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JIZHI_")}
    env["PYTHONPATH"] = PKG
    env["JIZHI_LIB"] = LIB
    env.update(extra)
    return env


def run_py(code, env, python=None, timeout=20):
    return subprocess.run([python or sys.executable, "-c", textwrap.dedent(code)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                          universal_newlines=True)


@pytest.fixture(scope="module", autouse=True)
def built():
    assert os.path.exists(LIB), "build it first: make %s" % os.path.relpath(LIB, ROOT)


STANDALONE = """
    import json, math, jizhi
    with jizhi.Trial() as t:
        out = {
            "id": t.trial_id, "standalone": t.standalone,
            "lr": t.param("lr", 0.1), "bs": t.param("bs", 32), "opt": t.param("opt", "sgd"),
            "missing": t.param("missing", 7), "flag": t.param("flag", False),
            "params": t.params, "ckdir": t.checkpoint_dir,
            "polled": [repr(i) for i in t.poll()],
            "report": t.report(3, loss=0.25, val_acc=float("nan")),
            "flush": t.flush(100), "ckdone": t.checkpoint_done(3, "/tmp/x"),
        }
        try:
            t.report(1, **{"bad name": 1.0})
            out["bad_name"] = "accepted"
        except ValueError:
            out["bad_name"] = "ValueError"
        out["types"] = [type(out[k]).__name__ for k in ("lr", "bs", "opt", "missing", "flag")]
    out["closed"] = t.closed
    print(json.dumps(out))
"""


@pytest.mark.parametrize("python", interpreters())
def test_standalone_defaults(python):
    r = run_py(STANDALONE, child_env(), python)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["id"] is None and out["standalone"] is True
    assert (out["lr"], out["bs"], out["opt"], out["missing"], out["flag"]) == (0.1, 32, "sgd", 7, False)
    assert out["types"] == ["float", "int", "str", "int", "bool"]
    assert out["params"] == {}
    assert out["ckdir"] == "."
    assert out["polled"] == []
    assert out["report"] is True and out["flush"] is True and out["ckdone"] is True
    assert out["bad_name"] == "ValueError"
    assert out["closed"] is True
    assert "jizhi: step 3 loss=0.25" in r.stderr
    assert "jizhi: step 3 val_acc=nan" in r.stderr


def test_standalone_params_from_env(tmp_path):
    ck = str(tmp_path / "ck" / "deep")
    env = child_env(JIZHI_PARAMS='{"lr": 0.02, "bs": 512, "opt": "lars", "flag": 1}',
                    JIZHI_CHECKPOINT_DIR=ck)
    r = run_py(STANDALONE, env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["lr"], out["bs"], out["opt"], out["flag"]) == (0.02, 512, "lars", True)
    assert out["params"] == {"lr": 0.02, "bs": 512, "opt": "lars", "flag": 1}
    assert out["ckdir"] == ck and os.path.isdir(ck)


def test_tuned_value_type_wins_over_the_default():
    code = """
    import json, warnings, jizhi
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with jizhi.Trial() as t:
            out = {"lr": t.param("lr", 1), "bs": t.param("bs", 32.0), "opt": t.param("opt", 0.5),
                   "flag": t.param("flag", False), "none": t.param("absent", 3)}
        out["types"] = [type(out[k]).__name__ for k in ("lr", "bs", "opt", "flag", "none")]
        out["warnings"] = [str(x.message) for x in w]
    print(json.dumps(out))
    """
    env = child_env(JIZHI_PARAMS='{"lr": 0.5, "bs": 64, "opt": "lamb", "flag": 1}')
    r = run_py(code, env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["lr"], out["bs"], out["opt"], out["flag"], out["none"]) == (0.5, 64, "lamb", True, 3)
    assert out["types"] == ["float", "int", "str", "bool", "int"]
    # only the real mismatch (a string for a number) warns
    assert len(out["warnings"]) == 1 and "'opt'" in out["warnings"][0]


@pytest.mark.parametrize("var,value", [
    ("JIZHI_PARAMS", "{not json"),
    ("JIZHI_TRIAL", "seven"),
    ("JIZHI_TOKEN", None),
])
def test_malformed_environment(var, value):
    env = child_env(JIZHI_TRIAL="7", JIZHI_ENDPOINT="ipc:///nonexistent/ctl", JIZHI_TOKEN="t")
    if value is None:
        del env[var]
    else:
        env[var] = value
    r = run_py("""
        import jizhi
        try:
            jizhi.Trial()
            print("opened")
        except jizhi.JizhiError:
            print("JizhiError")
    """, env)
    assert r.stdout.strip() == "JizhiError"
    assert var in r.stderr


def test_library_not_found(tmp_path):
    # a copy of the package outside the source tree: no build/ next to it
    shutil.copytree(os.path.join(PKG, "jizhi"), str(tmp_path / "jizhi"))
    env = child_env(JIZHI_LIB="/nonexistent/libjizhi.so")
    env["PYTHONPATH"] = str(tmp_path)
    r = run_py("""
        import ctypes.util, jizhi
        try:
            jizhi.Trial()
            print("loaded", ctypes.util.find_library("jizhi") is not None)
        except jizhi.JizhiError as e:
            print("JizhiError", "/nonexistent/libjizhi.so" in str(e))
    """, env)
    # only a libjizhi installed on the system library path could be found
    assert r.stdout.strip() in ("JizhiError True", "loaded True"), r.stdout + r.stderr


def test_only_jz_symbols_exported():
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("no nm")
    out = subprocess.run([nm, "-D", "--defined-only", LIB], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert "jz_open" in names
    assert [n for n in names if not n.startswith("jz_") or n.startswith("jz__")] == []


CLIENT = """
    import json, os, sys, time, jizhi
    n = int(sys.argv[1])
    t = jizhi.Trial()
    out = {"id": t.trial_id, "lr0": t.param("lr", 0.1), "bs0": t.param("batch_size", 32),
           "opt0": t.param("optimizer", "sgd"), "seen": []}
    for i in range(n):
        if i % 2 == 0:
            t.report(i, loss=float("nan") if i == 0 else 1.0 / i)
        else:
            t.report(i, val_acc=i * 0.5)
    deadline = time.time() + 10
    while len(out["seen"]) < 3 and time.time() < deadline:
        for ins in t.poll():
            out["seen"].append([ins.id, ins.kind, ins.name, ins.value])
            if ins.kind == "set" and ins.name == "lr":
                out["lr_after_set"] = t.param("lr", 0.1)
            if ins.kind == "set" and ins.name == "optimizer":
                out["opt_after_set"] = t.param("optimizer", "sgd")
                out["ack_refused"] = t.ack(ins, False, "optimizer is fixed")
                out["ack_again"] = t.ack(ins, True)
            if ins.kind == "checkpoint":
                path = os.path.join(t.checkpoint_dir, "step%d.ckpt" % n)
                with open(path, "w") as f:
                    f.write("weights")
                t.checkpoint_done(n, path)
                out["ckpt"] = path
        time.sleep(0.005)
    out["flush"] = t.flush(5000)
    t.close()
    print(json.dumps(out))
"""


def test_connected_against_fake_controller(tmp_path):
    assert os.path.exists(FAKE), "build it first: make %s" % os.path.relpath(FAKE, ROOT)
    endpoint = "ipc://%s/ctl" % tmp_path
    n = 5000
    params = json.dumps({"lr": 0.05, "batch_size": 256, "optimizer": "sgd"})
    server = subprocess.Popen([FAKE, "--serve", endpoint, str(n), params], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True)
    try:
        assert server.stdout.readline().strip() == "listening " + endpoint
        ck = str(tmp_path / "ck")
        env = child_env(JIZHI_TRIAL="7", JIZHI_STUDY="fake", JIZHI_ENDPOINT=endpoint,
                        JIZHI_TOKEN="s3cret", JIZHI_CHECKPOINT_DIR=ck,
                        JIZHI_PARAMS='{"lr": 0.1, "batch_size": 64}')
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(CLIENT), str(n)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=20)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        summary_line, err = server.communicate(timeout=20)
        assert server.returncode == 0, (summary_line, err)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    summary = json.loads(summary_line.strip().splitlines()[-1])

    # params: the hello reply's values win over JIZHI_PARAMS
    assert out["id"] == 7
    assert (out["lr0"], out["bs0"], out["opt0"]) == (0.05, 256, "sgd")
    # instructions: delivered once each, params updated before poll returns
    assert out["seen"] == [[1, "set", "lr", 0.5], [2, "set", "optimizer", "lamb"],
                           [3, "checkpoint", "", None]]
    assert out["lr_after_set"] == 0.5 and out["opt_after_set"] == "lamb"
    assert out["ack_refused"] is True and out["ack_again"] is False
    assert out["flush"] is True
    acks = {a["id"]: a for a in summary["acks"]}
    assert acks[1]["applied"] is True
    assert acks[2]["applied"] is False and acks[2]["detail"] == "optimizer is fixed"
    assert acks[3]["applied"] is True
    assert [(c["step"], c["path"]) for c in summary["checkpoints"]] == [(n, out["ckpt"])]
    assert os.path.exists(out["ckpt"])
    # metrics: all of them, in order, non-finite values intact
    assert summary["points"] == n and summary["bad_points"] == 0
    assert summary["names"] == {"loss": n // 2, "val_acc": n // 2}
    assert summary["first"] == [0, "loss", "nan"]
    assert summary["last"] == [n - 1, "val_acc", (n - 1) * 0.5]
    assert summary["nonfinite"] == [[0, "loss", "nan"]]


def test_instruction_struct_checked_against_the_library():
    """The ctypes struct has the C layout (jz_instruction_size), and a
    package whose struct disagrees refuses to load instead of letting
    jz_poll write past it."""
    code = """
        import ctypes, json, jizhi
        lib = jizhi.load_library()
        ok = lib.jz_instruction_size() == ctypes.sizeof(jizhi._CInstruction)
        kinds = [int(k) for k in jizhi.InsKind]
        print(json.dumps({"ok": ok, "kinds": kinds, "set": jizhi.InsKind(1).name}))
    """
    p = run_py(code, child_env())
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out == {"ok": True, "kinds": [0, 1, 2, 3, 4, 5, 6], "set": "SET"}
    with open(os.path.join(ROOT, "trial_helper", "jizhi.h")) as f:
        header = f.read()
    for i, name in enumerate(["NONE", "SET", "STOP", "PAUSE", "RESUME", "CHECKPOINT", "LOAD"]):
        assert "JZ_INS_" + name in header
    bad = """
        import ctypes, jizhi
        class Short(ctypes.Structure):
            _fields_ = [("kind", ctypes.c_int), ("id", ctypes.c_long), ("name", ctypes.c_char * 64)]
        jizhi._CInstruction = Short
        try:
            jizhi.load_library()
            print("loaded")
        except jizhi.JizhiError as e:
            print("refused:", e)
    """
    p = run_py(bad, child_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("refused:") and "jz_instruction is" in p.stdout, p.stdout


def test_pip_install_into_a_target(tmp_path):
    """`pip install trial_helper/python` works (pyproject.toml, setup.py
    compiles libjizhi from the source tree), here into a --target directory
    without the network (test_install.py installs into fresh venvs)."""
    pip = subprocess.run(["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True)
    if pip.returncode != 0:
        pytest.skip("no pip for /usr/bin/python3 (python3-pip)")
    target = tmp_path / "target"
    p = subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "-q", "--no-build-isolation",
                        "--no-deps", "--no-index", "--target", str(target), PKG],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (target / "jizhi" / "__init__.py").exists()
    dist = [d.name for d in target.iterdir() if d.name.endswith(".dist-info")]
    with open(os.path.join(ROOT, "trial_helper", "jizhi.h")) as f:
        version = [l.split('"')[1] for l in f if l.startswith("#define JZ_VERSION")][0]
    assert dist == ["jizhi-%s.dist-info" % version], dist
    env = child_env(PYTHONPATH=str(target))
    p = run_py("""
        import jizhi
        t = jizhi.Trial()
        print(jizhi.__file__, t.param("lr", 0.25), t.standalone)
        t.close()
    """, env, python="/usr/bin/python3")
    assert p.returncode == 0, p.stderr
    f, lr, standalone = p.stdout.split()
    assert f.startswith(str(target)) and lr == "0.25" and standalone == "True"


def test_create_study_and_tell_refuse_wrong_arguments_in_python_terms(tmp_path):
    # review37 item 7: an int spec was taken as a file descriptor (read and
    # closed); other types gave bare TypeErrors; tell(state="failed") with a
    # value dropped the value. Each is refused before anything is touched.
    code = """
        import json, os, jizhi
        fd = os.open(os.devnull, os.O_RDONLY)
        out = []
        for spec in (fd, 0, [1], None, 2.5):
            try:
                jizhi.create_study(spec, db=%r)
            except TypeError as e:
                out.append(str(e))
        os.fstat(fd)  # still open
        s = jizhi.Study("s", None)
        for kw in ({"value": 1.0, "state": "failed"}, {}, {"value": "abc"}):
            try:
                s.tell(1, **kw)
            except ValueError as e:
                out.append(str(e))
        # review40 item 5: a spec with `trial` is refused before it is stored
        spec = {"name": "wt", "objective": {"metric": "loss", "mode": "min"},
                "scheduler": {"type": "random"}, "budget": {"trials": 3},
                "space": {"x": {"type": "float", "low": 0, "high": 1}},
                "trial": {"command": ["true"]}}
        with open(%r, "w") as f:
            json.dump(spec, f)
        for sp in (spec, %r):
            try:
                jizhi.create_study(sp, db=%r)
            except jizhi.JizhiError as e:
                out.append(str(e))
        print(json.dumps(out))
    """ % ((str(tmp_path / "j.db"),) + (str(tmp_path / "wt.json"),) * 2 + (str(tmp_path / "j.db"),))
    p = run_py(code, child_env())
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out[:5] == ["jizhi: spec must be a dict or the path of a JSON file, not %s" % t
                       for t in ("int", "int", "list", "NoneType", "float")]
    assert out[5:8] == ["jizhi: a failed trial has no value (pass message= to say why)",
                       "jizhi: tell needs the trial's value (or values), or state='failed' "
                       "or 'pruned'",
                       "jizhi: value must be a number, not 'abc'"]
    refusal = ("the spec has a `trial` section: its trials run through dispatchers "
               "(trial.command), so submit it with `jizhi run SPEC` or `jizhi study submit "
               "SPEC`; create_study is for ask-and-tell (a spec without `trial`)")
    assert out[8:] == ["jizhi: " + refusal, "jizhi: %s: %s" % (tmp_path / "wt.json", refusal)]
    assert not os.path.exists(tmp_path / "j.db")


DRAIN = """
import time
import jizhi
stop = False
with jizhi.Trial() as t:             # docs/helper-api.md's example
    for step in range(100000):
        for ins in t.poll():
            if ins.kind == "stop":
                stop = True
        if stop:
            break
        t.report(step, score=step)
        time.sleep(0.02)
"""


def test_a_stop_obeyed_after_draining_poll_reads_as_taken(jz):
    """review40 item 1: a program that drains poll() (finds the queue empty
    after the stop) and then stops took the stop: its event says so, not
    "the program went on after stop"."""
    code = os.path.join(jz.dir, "drain.py")
    with open(code, "w") as f:
        f.write(DRAIN)
    spec = base_spec("drain", ["python3", code], trials=1, parallel=1)
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running_trial(jz)
        jz.run("trial", "stop", str(tid), check=0)
        jz.wait_trial_state(tid, "stopped", 30, "the trial to stop")
        ev = jz.sql("SELECT applied, result FROM events WHERE kind='instruction' AND "
                    "json_extract(detail, '$.kind')='stop'")
        assert len(ev) == 1 and ev[0][0] == 1, ev
        assert "did not take it" not in (ev[0][1] or ""), ev
    finally:
        stop(ctl, disp)
