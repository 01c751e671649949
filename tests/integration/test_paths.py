"""Paths and environments of a user's own program (issue 37, items 3 and 4):
`python3 train.py` and `./train.sh` are found in trial.cwd (the folder the
spec was submitted from) whatever folder the dispatcher runs in, through
`study submit`, `jizhi run` and POST /api/studies alike; what a dispatcher
cannot find fails the trial with the path it tried; trial.venv puts a
virtual environment first; a study no dispatcher can give its GPUs fails
`jizhi run` with the queue's reason and makes `study submit` warn."""
import json
import os
import stat
import subprocess

from conftest import JIZHI, base_spec
from test_recovery import stop
from webutil import http, make_token, wait_url

TRAIN_PY = """import os, subprocess, sys
with open("ran.txt", "a") as f:
    f.write(os.getcwd() + "\\n")
subprocess.run(["jizhi", "report", "score=1"], check=True)
"""


def project(jz, name="proj"):
    """A user's folder with train.py and train.sh (both report score=1)."""
    d = os.path.join(jz.dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "train.py"), "w") as f:
        f.write(TRAIN_PY)
    sh = os.path.join(d, "train.sh")
    with open(sh, "w") as f:
        f.write("#!/bin/sh\nexec python3 train.py\n")
    os.chmod(sh, os.stat(sh).st_mode | stat.S_IXUSR)
    return d


def cli(jz, cwd, *args, timeout=120):
    return subprocess.run([JIZHI, *args], cwd=cwd, env=jz.env, capture_output=True,
                          text=True, timeout=timeout)


def daemons_elsewhere(jz, *disp_args, http_addr=None):
    """A controller and a dispatcher started in a folder of their own (not
    the project's), as a shared service would be."""
    other = os.path.join(jz.dir, "service")
    os.makedirs(other, exist_ok=True)
    ep = f"ipc://{jz.dir}/ctl.sock"
    extra = ["--http", http_addr] if http_addr else []
    ctl = subprocess.Popen([JIZHI, "controller", "--db", jz.db, "--bind", ep, "--log",
                            os.path.join(jz.dir, "controller.log"), *extra], cwd=other,
                           env=jz.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    url = wait_url(ctl) if http_addr else None
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
    disp = subprocess.Popen([JIZHI, "dispatcher", "--controller", ep, "--slots", "2",
                             "--name", "m1", "--log-dir", os.path.join(jz.dir, "logs"),
                             *disp_args], cwd=other, env=jz.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM dispatchers")[0][0] == 1, 30,
                "the dispatcher")
    return ctl, disp, other, url


def ended(jz, study, n):
    return jz.sql("SELECT COUNT(*) FROM trials t JOIN studies s ON s.id=t.study_id WHERE "
                  "s.name=? AND t.state IN ('completed','failed','stopped')", study)[0][0] == n


def trials_of(jz, study):
    return jz.sql("SELECT t.id, t.state, t.reason FROM trials t JOIN studies s ON "
                  "s.id=t.study_id WHERE s.name=? ORDER BY t.id", study)


def stored_trial(jz, study):
    (text,) = jz.sql("SELECT spec FROM studies WHERE name=?", study)[0]
    return json.loads(text)["trial"]


def test_study_submit_finds_a_bare_script_in_the_submit_folder(jz):
    proj = project(jz)
    ctl, disp, other, _ = daemons_elsewhere(jz)
    try:
        for name, cmd in (("py", ["python3", "train.py"]), ("sh", ["./train.sh"])):
            spec = base_spec(name, cmd, trials=1, parallel=1)
            with open(os.path.join(proj, name + ".json"), "w") as f:
                json.dump(spec, f)
            p = cli(jz, proj, "study", "submit", name + ".json", "--db", jz.db)
            assert p.returncode == 0, p.stderr
            assert stored_trial(jz, name)["cwd"] == os.path.realpath(proj)
            jz.wait_for(lambda: ended(jz, name, 1), 60, f"study {name}'s trial")
            assert [r[1] for r in trials_of(jz, name)] == ["completed"], trials_of(jz, name)
        with open(os.path.join(proj, "ran.txt")) as f:
            assert f.read().split() == [os.path.realpath(proj)] * 2
        assert not os.path.exists(os.path.join(other, "ran.txt"))
    finally:
        stop(ctl, disp)


def test_jizhi_run_finds_a_bare_script_in_its_folder(jz):
    proj = project(jz)
    spec = base_spec("run1", ["python3", "train.py"], trials=1, parallel=1)
    with open(os.path.join(proj, "spec.json"), "w") as f:
        json.dump(spec, f)
    p = cli(jz, proj, "run", "spec.json", "--db", jz.db)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "best trial 1: score=1" in p.stdout
    with open(os.path.join(proj, "ran.txt")) as f:
        assert f.read().split() == [os.path.realpath(proj)]
    # an explicit trial.cwd, relative to where the command runs
    spec = base_spec("run2", ["./train.sh"], trials=1, parallel=1, cwd="proj")
    p = cli(jz, jz.dir, "run", jz.write_spec(spec, "run2.json"), "--db", jz.db)
    assert p.returncode == 0, p.stdout + p.stderr
    assert stored_trial(jz, "run2")["cwd"] == os.path.realpath(proj)


def test_web_api_runs_a_bare_script_in_trial_cwd(jz):
    proj = project(jz)
    ctl, disp, other, url = daemons_elsewhere(jz, http_addr="127.0.0.1:0")
    tok = make_token(jz, "alice")
    try:
        spec = base_spec("w1", ["python3", "train.py"], trials=1, parallel=1, cwd=proj)
        st, j, _ = http("POST", url + "/api/studies", spec, token=tok)
        assert st == 200 and j["ok"], j
        jz.wait_for(lambda: ended(jz, "w1", 1), 60, "the web study's trial")
        assert [r[1] for r in trials_of(jz, "w1")] == ["completed"], trials_of(jz, "w1")
        # a web client has no folder: a relative trial.cwd is refused ...
        bad = base_spec("w2", ["python3", "train.py"], trials=1, parallel=1, cwd="proj")
        st, j, _ = http("POST", url + "/api/studies", bad, token=tok)
        assert st == 400 and "trial.cwd: must be an absolute path" in j["message"], j
        # ... and without one, trials run in the server's folder
        spec = base_spec("w3", ["true"], trials=1, parallel=1)
        st, j, _ = http("POST", url + "/api/studies", spec, token=tok)
        assert st == 200, j
        assert stored_trial(jz, "w3")["cwd"] == os.path.realpath(other)
        assert jz.sql("SELECT COUNT(*) FROM studies WHERE name='w2'") == [(0,)]
    finally:
        stop(ctl, disp)


def test_what_the_dispatcher_cannot_find_fails_the_trial_with_the_path_tried(jz):
    proj = project(jz)
    # a missing script argument: the program says which path it tried
    spec = base_spec("miss", ["python3", "missing.py"], trials=1, parallel=1)
    with open(os.path.join(proj, "miss.json"), "w") as f:
        json.dump(spec, f)
    p = cli(jz, proj, "run", "miss.json", "--db", jz.db)
    assert p.returncode == 1
    (reason,) = [r[2] for r in trials_of(jz, "miss")]
    assert os.path.join(os.path.realpath(proj), "missing.py") in reason, reason
    # a missing program is refused at submit, naming where it looked
    spec = base_spec("miss2", ["./nope.sh"], trials=1, parallel=1)
    with open(os.path.join(proj, "miss2.json"), "w") as f:
        json.dump(spec, f)
    p = cli(jz, proj, "run", "miss2.json", "--db", jz.db)
    assert p.returncode == 1
    assert ("trial.command[0]: command not found: \"./nope.sh\" (looked for "
            f"{os.path.realpath(proj)}/nope.sh, in trial.cwd" in p.stderr), p.stderr
    # gone by the time the dispatcher starts it: the first trial removes
    # the script, the second fails with the path the dispatcher tried
    with open(os.path.join(proj, "once.sh"), "w") as f:
        f.write("#!/bin/sh\nrm -f \"$0\"\nexec jizhi report score=1\n")
    os.chmod(os.path.join(proj, "once.sh"), 0o755)
    spec = base_spec("once", ["./once.sh"], trials=2, parallel=1)
    with open(os.path.join(proj, "once.json"), "w") as f:
        json.dump(spec, f)
    cli(jz, proj, "run", "once.json", "--db", jz.db)
    rows = trials_of(jz, "once")
    assert [r[1] for r in rows] == ["completed", "failed"], rows
    assert (f"execvp {os.path.realpath(proj)}/once.sh: No such file or directory"
            in rows[1][2]), rows


def make_venv(path):
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", path], check=True,
                   timeout=120)


def test_venv_goes_first_on_the_trials_path(jz):
    proj = project(jz)
    venv = os.path.join(proj, ".venv")
    make_venv(venv)
    code = ("import os, subprocess, sys; print('prefix', sys.prefix); "
            "print('virtual_env', os.environ['VIRTUAL_ENV']); "
            "print('home', os.environ.get('PYTHONHOME')); "
            "subprocess.run(['jizhi', 'report', 'score=1'], check=True)")
    spec = base_spec("venv", ["python3", "-c", code], trials=1, parallel=1, venv=".venv")
    with open(os.path.join(proj, "venv.json"), "w") as f:
        json.dump(spec, f)
    env = dict(jz.env, PYTHONHOME="/nonexistent")  # a venv's python must not see it
    p = subprocess.run([JIZHI, "run", "venv.json", "--db", jz.db], cwd=proj, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    venv = os.path.realpath(venv)
    assert stored_trial(jz, "venv")["venv"] == venv
    out = jz.run("trial", "logs", "1", check=0).stdout
    assert f"prefix {venv}" in out and f"virtual_env {venv}" in out, out
    assert "home None" in out, out


def test_a_bad_venv_is_refused_at_submit_and_fails_the_trial_at_the_dispatcher(jz):
    proj = project(jz)
    os.makedirs(os.path.join(proj, "notavenv"))
    spec = base_spec("badv", ["python3", "train.py"], trials=1, parallel=1, venv="notavenv")
    with open(os.path.join(proj, "badv.json"), "w") as f:
        json.dump(spec, f)
    for cmd in (["run", "badv.json"], ["study", "submit", "badv.json"]):
        p = cli(jz, proj, *cmd, "--db", jz.db)
        assert p.returncode == 1, p.stdout + p.stderr
        assert (f"trial.venv: {os.path.realpath(proj)}/notavenv is not a virtual "
                "environment: it has no executable bin/python") in p.stderr, p.stderr
    assert not os.path.exists(jz.db) or jz.sql("SELECT COUNT(*) FROM studies") == [(0,)]
    # a venv that is gone when the dispatcher starts the trial: the first
    # trial removes its python, the second fails saying so
    venv = os.path.join(proj, "v2")
    make_venv(venv)
    spec = base_spec("gone", ["sh", "-c", f"rm {venv}/bin/python; jizhi report score=1"],
                     trials=2, parallel=1, venv="v2")
    with open(os.path.join(proj, "gone.json"), "w") as f:
        json.dump(spec, f)
    cli(jz, proj, "run", "gone.json", "--db", jz.db)
    rows = trials_of(jz, "gone")
    assert [r[1] for r in rows] == ["completed", "failed"], rows
    assert (f"trial.venv {os.path.realpath(venv)} is not a virtual environment on this "
            "dispatcher's machine" in rows[1][2]), rows


def no_gpus(jz):
    """PATH with an nvidia-smi that finds no GPU, so the local dispatcher
    has none whatever machine runs the test."""
    bindir = os.path.join(jz.dir, "fakebin")
    os.makedirs(bindir, exist_ok=True)
    with open(os.path.join(bindir, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\nexit 9\n")
    os.chmod(os.path.join(bindir, "nvidia-smi"), 0o755)
    jz.env["PATH"] = bindir + os.pathsep + jz.env["PATH"]


UNFIT = "no dispatcher can run it: a trial needs 1 slots and 1 GPUs on one machine"


def test_jizhi_run_of_a_study_no_dispatcher_can_host_fails_with_the_reason(jz):
    no_gpus(jz)
    spec = base_spec("gpu", ["true"], trials=1, parallel=1, gpus=1)
    p = jz.run("run", jz.write_spec(spec), timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"study gpu cannot start: {UNFIT}" in p.stderr, p.stderr
    assert jz.sql("SELECT state FROM studies WHERE name='gpu'") == [("stopped",)]
    assert jz.sql("SELECT COUNT(*) FROM trials WHERE state != 'pending'") == [(0,)]


def test_study_submit_warns_of_a_study_no_dispatcher_can_host(jz):
    no_gpus(jz)
    ctl, disp, _, _ = daemons_elsewhere(jz)
    try:
        spec = base_spec("gpu", ["true"], trials=1, parallel=1, gpus=1)
        p = jz.run("study", "submit", jz.write_spec(spec), "--db", jz.db)
        assert p.returncode == 0, p.stderr
        assert "study gpu submitted" in p.stdout
        assert f"warning: study gpu waits: {UNFIT}" in p.stderr, p.stderr
        assert jz.sql("SELECT state FROM studies WHERE name='gpu'") == [("running",)]
        # a study that fits gets no warning
        p = jz.run("study", "submit", jz.write_spec(base_spec("cpu", ["true"], trials=1),
                                                    "cpu.json"), "--db", jz.db)
        assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    finally:
        stop(ctl, disp)
