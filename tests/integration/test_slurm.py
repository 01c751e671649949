"""The Slurm backend against a real one-node Slurm cluster on localhost
(tests/slurm/cluster.sh: munged, slurmctld, slurmd, 2 CPUs): a 6-trial study
with parallel 2 where every trial attempt is a Slurm job, a job cancelled
from outside with scancel that comes back as a retried attempt, a restarted
dispatcher taking its jobs back (and leaving another store's alone), exit
codes and timeouts through Slurm, and the dispatcher's usage errors. Where Slurm
is missing or does not start, the cluster tests are SKIPPED with the reason."""
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, JIZHI, PROGS, ROOT, base_spec
from test_recovery import start_controller, stop

CLUSTER = os.path.join(ROOT, "tests", "slurm", "cluster.sh")


@pytest.fixture(scope="module")
def slurm():
    """SLURM_CONF of a cluster started for this module (torn down after)."""
    if os.geteuid() != 0:
        pytest.skip("the test cluster needs root (slurmd runs jobs as their users)")
    d = tempfile.mkdtemp(prefix="jizhi-slurm-")
    # two GPUs as a generic resource (copies of /dev/null as their devices)
    p = subprocess.run([CLUSTER, "up", d], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, CLUSTER_GPUS="2"))
    if p.returncode != 0:
        logs = ""
        for name in ("slurmctld.log", "slurmd.log"):
            path = os.path.join(d, "logs", name)
            if os.path.exists(path):
                with open(path) as f:
                    logs += f"\n{name}: " + " | ".join(f.read().splitlines()[-3:])
        subprocess.run([CLUSTER, "down", d], capture_output=True, timeout=60)
        shutil.rmtree(d, ignore_errors=True)
        pytest.skip(f"Slurm cannot start here: {p.stderr.strip()}{logs}")
    conf = p.stdout.strip().split("=", 1)[1]
    yield conf
    subprocess.run([CLUSTER, "down", d], capture_output=True, timeout=60)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def empty_queue(request):
    """Each cluster test leaves Slurm's queue empty for the next: a job a
    test left running (its dispatcher stopped, or the test failed) must not
    hold CPUs, nor be taken back by the next test's dispatcher of the same
    name as a trial of its own."""
    if "slurm" not in request.fixturenames:
        yield
        return
    conf = request.getfixturevalue("slurm")
    yield
    env = dict(os.environ, SLURM_CONF=conf)
    subprocess.run(["scancel", "-u", "root"], env=env, capture_output=True, timeout=30)
    end = time.time() + 30
    while time.time() < end:
        p = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True,
                           text=True, timeout=30)
        if p.returncode == 0 and not p.stdout.strip():
            return
        time.sleep(0.2)
    raise AssertionError("jobs still in Slurm's queue 30 s after scancel")


def squeue_answer(conf, *args):
    """squeue's stdout once it answers (slurmctld can be busy for a moment)."""
    env = dict(os.environ, SLURM_CONF=conf)
    end = time.time() + 30
    while True:
        p = subprocess.run(["squeue", "-h", *args], env=env, capture_output=True, text=True,
                           timeout=30)
        if p.returncode == 0 or time.time() > end:
            assert p.returncode == 0, f"squeue {' '.join(args)}: {p.stderr.strip()}"
            return p.stdout.strip()
        time.sleep(0.2)


def first_report(jz):
    """Waits for the trial's first metric and for its job id: the trial can
    report before the dispatcher's squeue saw its job run and told the
    controller (the trial's pid is 0 until then)."""
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0 and
                (jz.sql("SELECT pid FROM trials")[0][0] or 0) > 0, 60,
                "the first attempt to report and its job to be known")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def daemons(jz, conf, *extra, lost="20"):
    """A controller on TCP and a slurm dispatcher; returns (ctl, disp)."""
    jz.env["SLURM_CONF"] = conf
    ep = f"tcp://127.0.0.1:{free_port()}"
    ctl = start_controller(jz, ep, lost)
    disp = jz.popen("dispatcher", "--backend", "slurm", "--controller", ep, "--name", "sl",
                    "--max-jobs", "4", "--poll-s", "0.2", "--log-dir",
                    os.path.join(jz.dir, "logs"), "--log", os.path.join(jz.dir, "disp.log"),
                    *extra)
    return ctl, disp


def scontrol(conf, job):
    env = dict(os.environ, SLURM_CONF=conf)
    out = subprocess.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True,
                         text=True, env=env, timeout=30).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def formula(name, trials, parallel, steps, step_s="0.03", **trial):
    spec = base_spec(name, ["python3", os.path.join(PROGS, "formula_trial.py")],
                     trials=trials, parallel=parallel,
                     env={"FORMULA_STEPS": steps, "FORMULA_STEP_S": step_s}, **trial)
    spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True}}
    return spec


def wait_study(jz, name, timeout=120):
    jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name=?", name)[0][0]
                in ("finished", "completed", "stopped", "failed"), timeout, f"study {name} to end")


def test_six_trials_parallel_two_each_a_slurm_job(jz, slurm):
    ctl, disp = daemons(jz, slurm)
    try:
        jz.run("study", "submit", jz.write_spec(formula("six", 6, 2, "40", "0.05")), check=0)
        wait_study(jz, "six", 180)
        rows = jz.sql("SELECT id, state, attempt, pid, dispatcher, started, ended, out_path "
                      "FROM trials ORDER BY number")
        assert len(rows) == 6
        assert [r[1] for r in rows] == ["completed"] * 6, rows
        assert all(r[2] == 0 and r[4] == "sl" for r in rows)
        jobs = [r[3] for r in rows]
        assert len(set(jobs)) == 6 and all(j > 0 for j in jobs)
        for tid, _, _, job, _, _, _, out in rows:
            # the pid is the Slurm job: named after the trial, completed, its
            # output in the trial's log file, started from the written script
            info = scontrol(slurm, job)
            assert info.get("JobName") == f"jizhi-{tid}.0", info
            assert info.get("JobState") == "COMPLETED" and info.get("ExitCode") == "0:0"
            assert info.get("StdOut") == out and out.endswith(f"trial-{tid}.0.out")
            assert info.get("Command", "").endswith(f"trial-{tid}.0.sbatch")
            steps = jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=? AND name='score'", tid)
            assert steps[0][0] == 40
        # parallel 2: at most two trials at once, and two did run together
        ev = sorted([(r[5], 1) for r in rows] + [(r[6], -1) for r in rows],
                    key=lambda e: (e[0], e[1]))
        cur = peak = 0
        for _, d in ev:
            cur += d
            peak = max(peak, cur)
        assert peak == 2
        with open(os.path.join(jz.dir, "disp.log")) as f:
            log = f.read()
        assert "sacct unavailable" in log  # no slurmdbd here: said so
    finally:
        stop(disp, ctl)


def test_trial_endpoint_is_the_address_the_jobs_reach_the_controller_at(jz, slurm):
    """--trial-endpoint: the controller listens on every address; the
    dispatcher reaches it at 127.0.0.1, the jobs are told 127.0.0.2 (as a
    compute node would be told the controller's address on its network),
    and their reports arrive through it."""
    jz.env["SLURM_CONF"] = slurm
    port = free_port()
    ctl = start_controller(jz, f"tcp://*:{port}")
    trial_ep = f"tcp://127.0.0.2:{port}"
    disp = jz.popen("dispatcher", "--backend", "slurm", "--controller",
                    f"tcp://127.0.0.1:{port}", "--trial-endpoint", trial_ep, "--name", "sl",
                    "--max-jobs", "4", "--poll-s", "0.2", "--log-dir",
                    os.path.join(jz.dir, "logs"), "--insecure")
    seen = os.path.join(jz.dir, "endpoint-seen")
    try:
        spec = base_spec("ep", ["sh", "-c", f'echo "$JIZHI_ENDPOINT" >> {seen}; '
                                "exec jizhi report --step 1 score={x}"], trials=2, parallel=2)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        wait_study(jz, "ep", 120)
        assert [r[0] for r in jz.sql("SELECT state FROM trials")] == ["completed"] * 2
        assert jz.sql("SELECT COUNT(*) FROM metrics WHERE name='score'") == [(2,)]
        with open(seen) as f:
            assert f.read().split() == [trial_ep] * 2
    finally:
        stop(disp, ctl)


def test_a_queued_job_is_neither_lost_nor_timed_out(jz, slurm):
    """Waiting in Slurm's queue longer than the controller's lost timeout and
    than timeout_s: the dispatcher lists the job as its own meanwhile, and
    the trial's clock starts when the job runs."""
    env = dict(os.environ, SLURM_CONF=slurm)
    hog = subprocess.run(["sbatch", "--parsable", "-n", "2", "-o", "/dev/null", "--wrap",
                          "sleep 8"], env=env, capture_output=True, text=True, check=True,
                         timeout=30).stdout.strip()
    ctl, disp = daemons(jz, slurm, lost="3")
    try:
        jz.wait_for(lambda: scontrol(slurm, hog).get("JobState") == "RUNNING", 30,
                    "the job holding both CPUs to run")
        spec = base_spec("queued", ["sh", "-c", "sleep 1; jizhi report score=1"], trials=1,
                         parallel=1, timeout_s=5)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT id FROM trials"), 30, "the trial")
        ((tid,),) = jz.sql("SELECT id FROM trials")

        def queued():
            return subprocess.run(["squeue", "-h", "-n", f"jizhi-{tid}.0", "-o", "%T"],
                                  env=env, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        jz.wait_for(lambda: queued() == "PENDING", 30, "the trial's job in the queue")
        wait_study(jz, "queued", 60)
        ((job,),) = jz.sql("SELECT pid FROM trials")
        ((state, attempt),) = jz.sql("SELECT state, attempt FROM trials")
        assert (state, attempt) == ("completed", 0)
        assert jz.sql("SELECT COUNT(*) FROM events WHERE kind='retry'")[0][0] == 0
        # it waited for the CPUs: it started only after the other job ended
        assert scontrol(slurm, job)["StartTime"] >= scontrol(slurm, hog)["EndTime"]
    finally:
        subprocess.run(["scancel", hog], env=env, timeout=30)
        stop(disp, ctl)


def test_job_cancelled_outside_is_lost_and_retried(jz, slurm):
    ctl, disp = daemons(jz, slurm)
    try:
        jz.run("study", "submit", jz.write_spec(formula("cancel", 1, 1, "150")), check=0)
        first_report(jz)
        ((tid, job0),) = jz.sql("SELECT id, pid FROM trials")
        env = dict(os.environ, SLURM_CONF=slurm)
        subprocess.run(["scancel", str(job0)], check=True, env=env, timeout=30)
        wait_study(jz, "cancel", 120)
        ((state, attempt, job1),) = jz.sql("SELECT state, attempt, pid FROM trials")
        # retries is 0: only a lost attempt is retried, and it was
        assert state == "completed" and attempt == 1
        assert job1 != job0
        assert scontrol(slurm, job0).get("JobState") == "CANCELLED"
        assert scontrol(slurm, job1).get("JobState") == "COMPLETED"
        detail = " ".join(str(r) for r in jz.sql("SELECT kind, detail FROM events"))
        assert "cancelled outside jizhi" in detail, detail
        assert jz.sql("SELECT COUNT(*) FROM metrics WHERE attempt=1 AND name='score'")[0][0] == 150
    finally:
        stop(disp, ctl)


def test_dispatcher_restart_takes_its_jobs_back(jz, slurm):
    """Stopping the dispatcher leaves its jobs running; one started again
    with the same name finds them by their comment and reports them: the
    trial completes in its first attempt, in its first job."""
    ctl, disp = daemons(jz, slurm)
    try:
        jz.run("study", "submit", jz.write_spec(formula("restart", 1, 1, "200")), check=0)
        first_report(jz)
        ((job0,),) = jz.sql("SELECT pid FROM trials")
        stop(disp)
        assert disp.returncode == 0
        assert scontrol(slurm, job0).get("JobState") == "RUNNING"
        ((tid, token),) = jz.sql("SELECT id, token FROM trials")
        comment = squeue_answer(slurm, "-t", "all", "-j", str(job0), "-o", "%k|%T")
        tag = hashlib.sha256(token.encode()).hexdigest()[:16]
        assert comment == f"jizhi sl trial {tid} attempt 0 tag {tag}|RUNNING"
        # its first squeue fails, as with a busy slurmctld: it asks again
        shim = os.path.join(jz.dir, "shim")
        os.makedirs(shim)
        real = shutil.which("squeue")
        with open(os.path.join(shim, "squeue"), "w") as f:
            f.write(f"#!/bin/sh\nif [ ! -e {shim}/failed ]; then : > {shim}/failed; "
                    "echo 'squeue: error: Socket timed out' >&2; exit 1; fi\n"
                    f'exec {real} "$@"\n')
        os.chmod(os.path.join(shim, "squeue"), 0o755)
        disp = subprocess.Popen(
            [JIZHI, "dispatcher", "--backend", "slurm",
             "--controller", open(jz.db + ".endpoint").read().strip(), "--name", "sl",
             "--poll-s", "0.2", "--log-dir", os.path.join(jz.dir, "logs"), "--log",
             os.path.join(jz.dir, "disp2.log")], cwd=jz.dir,
            env=dict(jz.env, PATH=shim + os.pathsep + jz.env.get("PATH", "")),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_study(jz, "restart", 120)
        ((state, attempt, job1),) = jz.sql("SELECT state, attempt, pid FROM trials")
        assert (state, attempt, job1) == ("completed", 0, job0)
        assert scontrol(slurm, job0).get("JobState") == "COMPLETED"
        with open(os.path.join(jz.dir, "disp2.log")) as f:
            log = f.read()
        assert "squeue --me: squeue: error: Socket timed out; asking again in 1 s" in log, log
        assert f"took back job {job0}" in log, log
        assert jz.sql("SELECT COUNT(*) FROM events WHERE kind='retry'")[0][0] == 0
    finally:
        stop(disp, ctl)


def test_a_job_of_another_store_is_not_taken_for_this_ones_trial(jz, slurm):
    """A job another store's dispatcher of the same name left running, with
    the comment of trial 1 attempt 0: this dispatcher takes it back, the
    controller finds its tag is not its trial 1's and disowns it. The job
    is left alone, and this store's trial 1 runs in a job of its own."""
    env = dict(os.environ, SLURM_CONF=slurm)
    script = os.path.join(jz.dir, "trial-1.0.sbatch")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nsleep 120\n")
    os.chmod(script, 0o755)
    stranger = subprocess.run(
        ["sbatch", "--parsable", "--comment=jizhi sl trial 1 attempt 0 tag 0123456789abcdef",
         "-o", "/dev/null", script], env=env, capture_output=True, text=True, check=True,
        timeout=30).stdout.strip()
    jz.wait_for(lambda: scontrol(slurm, stranger).get("JobState") == "RUNNING", 30,
                "the stranger job to run")
    ctl, disp = daemons(jz, slurm)
    try:
        jz.run("study", "submit", jz.write_spec(formula("stranger", 1, 1, "30")), check=0)
        wait_study(jz, "stranger", 120)
        ((tid, state, attempt, job),) = jz.sql("SELECT id, state, attempt, pid FROM trials")
        assert (tid, state, attempt) == (1, "completed", 0)
        assert job != int(stranger)
        assert jz.sql("SELECT COUNT(*) FROM metrics WHERE name='score'")[0][0] == 30
        assert scontrol(slurm, stranger).get("JobState") == "RUNNING"
        with open(os.path.join(jz.dir, "disp.log")) as f:
            log = f.read()
        assert f"took back job {stranger} (RUNNING): trial 1 attempt 0 tag 0123456789abcdef" \
            in log, log
        assert "not an attempt of this controller's store; left running" in log, log
        # this store's own job carries its attempt's tag
        comment = squeue_answer(slurm, "-t", "all", "-j", str(job), "-o", "%k")
        assert re.fullmatch(r"jizhi sl trial 1 attempt 0 tag [0-9a-f]{16}", comment), comment
        assert not comment.endswith("0123456789abcdef")
    finally:
        stop(disp, ctl)


def test_preempted_job_is_lost_and_retried(jz, slurm):
    """A job of the higher-priority partition "urgent" needs both CPUs:
    Slurm preempts (cancels) the trial's job; jizhi runs the trial again."""
    ctl, disp = daemons(jz, slurm)
    env = dict(os.environ, SLURM_CONF=slurm)
    try:
        jz.run("study", "submit", jz.write_spec(formula("preempt", 1, 1, "150")), check=0)
        first_report(jz)
        ((job0,),) = jz.sql("SELECT pid FROM trials")
        subprocess.run(["sbatch", "-p", "urgent", "-n", "2", "-o", "/dev/null", "--wrap",
                        "sleep 1"], env=env, check=True, capture_output=True, timeout=30)
        wait_study(jz, "preempt", 120)
        ((state, attempt, job1),) = jz.sql("SELECT state, attempt, pid FROM trials")
        events = jz.sql("SELECT kind, detail FROM events")
        why = f"events {events}; job {job0}: {scontrol(slurm, job0)}"
        ctld = os.path.join(os.path.dirname(slurm), "logs", "slurmctld.log")
        for path in (os.path.join(jz.dir, "disp.log"), os.path.join(jz.dir, "controller.log"),
                     ctld):
            if os.path.exists(path):
                with open(path) as f:
                    why += f"\n{os.path.basename(path)}: " + " | ".join(
                        f.read().splitlines()[-25:])
        assert (state, attempt) == ("completed", 1) and job1 != job0, why
        assert scontrol(slurm, job0).get("JobState") == "PREEMPTED", why
        assert "was preempted" in " ".join(str(e) for e in events), why
    finally:
        stop(disp, ctl)


def test_node_failure_is_lost_and_retried(jz, slurm):
    ctl, disp = daemons(jz, slurm)
    env = dict(os.environ, SLURM_CONF=slurm)

    def node(*args):
        subprocess.run(["scontrol", "update", "NodeName=jizhi-node", *args], check=True,
                       env=env, timeout=30)

    try:
        jz.run("study", "submit", jz.write_spec(formula("nodefail", 1, 1, "150")), check=0)
        first_report(jz)
        ((job0,),) = jz.sql("SELECT pid FROM trials")
        node("State=DOWN", "Reason=jizhi-test")  # Slurm kills its jobs: NODE_FAIL
        jz.wait_for(lambda: scontrol(slurm, job0).get("JobState") == "NODE_FAIL", 30,
                    "the job to end in NODE_FAIL")
        # the node comes back by itself (ReturnToService=2), or on RESUME
        jz.wait_for(lambda: subprocess.run(
            ["scontrol", "update", "NodeName=jizhi-node", "State=RESUME"], env=env,
            capture_output=True, timeout=30).returncode == 0 or subprocess.run(
            ["sinfo", "-h", "-n", "jizhi-node", "-o", "%t"], env=env, capture_output=True,
            text=True, timeout=30).stdout.strip() in ("idle", "mix"), 60, "the node to resume")
        wait_study(jz, "nodefail", 120)
        ((state, attempt),) = jz.sql("SELECT state, attempt FROM trials")
        assert state == "completed" and attempt == 1
        detail = " ".join(str(r) for r in jz.sql("SELECT detail FROM events"))
        assert "its node failed (NODE_FAIL)" in detail, detail
    finally:
        subprocess.run(["scontrol", "update", "NodeName=jizhi-node", "State=RESUME"],
                       env=env, capture_output=True, timeout=30)
        stop(disp, ctl)


def test_job_requeued_by_an_administrator_is_cancelled_lost_and_retried(jz, slurm):
    """jizhi submits --no-requeue; an administrator can still requeue a
    job. The dispatcher cancels it: the retry is jizhi's, as a new attempt."""
    ctl, disp = daemons(jz, slurm)
    env = dict(os.environ, SLURM_CONF=slurm)
    try:
        jz.run("study", "submit", jz.write_spec(formula("requeue", 1, 1, "150")), check=0)
        first_report(jz)
        ((job0,),) = jz.sql("SELECT pid FROM trials")
        assert scontrol(slurm, job0).get("Requeue") == "0"
        for cmd in (["update", f"JobId={job0}", "Requeue=1"], ["requeue", str(job0)]):
            subprocess.run(["scontrol", *cmd], check=True, env=env, timeout=30)
        wait_study(jz, "requeue", 120)
        ((state, attempt, job1),) = jz.sql("SELECT state, attempt, pid FROM trials")
        assert state == "completed" and attempt == 1 and job1 != job0
        assert scontrol(slurm, job0).get("JobState") == "CANCELLED"
        detail = " ".join(str(r) for r in jz.sql("SELECT detail FROM events"))
        assert "was requeued" in detail, detail
    finally:
        stop(disp, ctl)


def test_exit_code_and_timeout_through_slurm(jz, slurm):
    ctl, disp = daemons(jz, slurm)
    try:
        crash = base_spec("crash", ["sh", "-c", "echo to-stderr >&2; exit 3"], trials=1,
                          parallel=1)
        jz.run("study", "submit", jz.write_spec(crash, "crash.json"), check=0)
        slow = base_spec("slow", ["sleep", "300"], trials=1, parallel=1, timeout_s=2)
        jz.run("study", "submit", jz.write_spec(slow, "slow.json"), check=0)
        wait_study(jz, "crash", 60)
        wait_study(jz, "slow", 60)
        rows = dict((n, r) for n, *r in jz.sql(
            "SELECT s.name, t.state, t.exit_how, t.exit_code, t.reason, t.pid, t.err_path "
            "FROM trials t JOIN studies s ON s.id=t.study_id"))
        state, how, code, reason, job, err = rows["crash"]
        assert (state, how, code) == ("failed", "exited", 3), rows["crash"]
        assert "exited with status 3" in reason
        with open(err) as f:
            assert "to-stderr" in f.read()
        assert scontrol(slurm, job).get("ExitCode") == "3:0"
        state, how, code, reason, job, _ = rows["slow"]
        assert (state, how) == ("failed", "timeout"), rows["slow"]
        # our timeout cancelled it long before Slurm's own (minutes) limit
        info = scontrol(slurm, job)
        assert info.get("JobState") in ("CANCELLED", "FAILED", "COMPLETED"), info
        assert re.match(r"00:00:0\d$", info.get("RunTime", "")), info
    finally:
        stop(disp, ctl)


def test_unknown_partition_fails_the_start_with_sbatchs_reason(jz, slurm):
    ctl, disp = daemons(jz, slurm, "--partition", "nosuchpartition")
    try:
        jz.run("study", "submit", jz.write_spec(base_spec("nopart", ["true"], trials=1,
                                                          parallel=1)), check=0)
        wait_study(jz, "nopart", 60)
        ((state, how, reason),) = jz.sql("SELECT state, exit_how, reason FROM trials")
        assert (state, how) == ("failed", "start_failed"), (state, how, reason)
        assert "sbatch failed" in reason and "invalid partition" in reason.lower(), reason
    finally:
        stop(disp, ctl)


def test_gpus_become_gres_and_slurm_picks_the_devices(jz, slurm):
    """gpus: 1 per trial, --max-gpus 2: jobs ask --gres=gpu:1, two run at
    once, and each sees the device Slurm gave it in CUDA_VISIBLE_DEVICES."""
    ctl, disp = daemons(jz, slurm, "--max-gpus", "2")
    try:
        spec = base_spec("gpus", ["sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES; sleep 1; "
                                  "jizhi report score=1"], trials=4, parallel=4, gpus=1)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        wait_study(jz, "gpus", 120)
        rows = jz.sql("SELECT state, pid, out_path, started, ended FROM trials")
        assert [r[0] for r in rows] == ["completed"] * 4, rows
        seen = set()
        for _, job, out, _, _ in rows:
            info = scontrol(slurm, job)
            assert "gpu:1" in info.get("TresPerNode", ""), info
            with open(out) as f:
                cvd = f.read().split("CVD=")[1].split()[0]
            assert cvd in ("0", "1")
            seen.add(cvd)
        # two GPUs for four one-GPU trials: never more than two at once
        ev = sorted([(r[3], 1) for r in rows] + [(r[4], -1) for r in rows],
                    key=lambda e: (e[0], e[1]))
        cur = peak = 0
        for _, d in ev:
            cur += d
            peak = max(peak, cur)
        assert peak == 2 and seen == {"0", "1"}
    finally:
        stop(disp, ctl)


def test_two_rank_trial_through_srun(jz, slurm):
    """trial.ranks = 2: one job with --ntasks=2 whose script runs srun, and
    srun starts the two MPI ranks of jizhi-train (PMIx)."""
    if not shutil.which("mpirun"):
        pytest.skip("jizhi-train's MPI ranks need OpenMPI (openmpi-bin), not installed")
    train = os.path.join(BUILD, "bin", "jizhi-train")
    ctl, disp = daemons(jz, slurm)
    try:
        spec = base_spec("ranks", [train, "--dataset", "synthetic", "--synthetic-n", "2000",
                                   "--val-size", "200", "--hidden", "16", "--epochs", "2",
                                   "--batch-size", "32", "--threads", "1"],
                         trials=1, parallel=1, ranks=2, timeout_s=120)
        spec["objective"] = {"metric": "val_acc", "mode": "max"}
        spec["space"] = {"lr": {"type": "float", "low": 0.05, "high": 0.05}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        wait_study(jz, "ranks", 180)
        ((tid, state, job, err),) = jz.sql("SELECT id, state, pid, err_path FROM trials")
        assert state == "completed", jz.sql("SELECT reason FROM trials")
        info = scontrol(slurm, job)
        assert info.get("NumTasks") == "2" and info.get("JobState") == "COMPLETED", info
        with open(info["Command"]) as f:
            assert "exec srun --ntasks=2 " in f.read()
        with open(err) as f:
            log = f.read()
        assert "2 ranks: weights identical on every rank" in log, log[-2000:]
        assert jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=? AND name='val_acc'",
                      tid)[0][0] > 0
    finally:
        stop(disp, ctl)


def test_torch_launcher_two_ranks_through_srun(jz, slurm):
    """trial.launcher "torch", ranks 2: one job whose srun starts both ranks
    through the wrapper that maps SLURM_PROCID and friends to RANK and
    friends, MASTER_ADDR the job's first node (its NodeAddr): the gloo group
    forms across the two tasks and rank 0 reports the all_reduce."""
    py = "/usr/bin/python3"
    if subprocess.run([py, "-c", "import torch.distributed"], capture_output=True,
                      timeout=60).returncode != 0:
        pytest.skip("%s has no torch (python3-torch)" % py)
    ctl, disp = daemons(jz, slurm)
    try:
        spec = base_spec("tddp", [py, os.path.join(PROGS, "ddp_env.py"), JIZHI], trials=1,
                         parallel=1, ranks=2, launcher="torch", timeout_s=120)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        wait_study(jz, "tddp", 180)
        ((tid, state, job, out, reason),) = jz.sql(
            "SELECT id, state, pid, out_path, reason FROM trials")
        assert state == "completed", reason
        info = scontrol(slurm, job)
        assert info.get("NumTasks") == "2" and info.get("JobState") == "COMPLETED", info
        with open(out) as f:
            ranks = sorted((json.loads(line) for line in f if line.startswith("{")),
                           key=lambda r: r["rank"])
        assert [r["rank"] for r in ranks] == [0, 1], ranks
        for r in ranks:
            e = r["env"]
            assert (r["world"], r["sum"]) == (2, 3.0), r
            assert (e["RANK"], e["LOCAL_RANK"], e["JIZHI_RANK"]) == (str(r["rank"]),) * 3, e
            assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["GROUP_RANK"],
                    e["MASTER_ADDR"], e["JIZHI_TRIAL"]) == ("2", "2", "0", "127.0.0.1",
                                                            str(tid)), e
        assert ranks[0]["env"]["MASTER_PORT"] == ranks[1]["env"]["MASTER_PORT"]
        assert jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='score'",
                      tid) == [(3.0,)]
    finally:
        stop(disp, ctl)


def test_dispatcher_usage_errors(jz):
    p = jz.run("dispatcher", "--backend", "slurm", "--controller", f"ipc://{jz.dir}/x.sock")
    assert p.returncode == 1
    assert "needs a tcp:// endpoint" in p.stderr
    p = jz.run("dispatcher", "--controller", "tcp://127.0.0.1:9", "--partition", "gpu")
    assert p.returncode == 2 and "--partition needs --backend slurm" in p.stderr
    p = jz.run("dispatcher", "--backend", "pbs", "--controller", "tcp://127.0.0.1:9")
    assert p.returncode == 2 and "expected local or slurm" in p.stderr
    p = jz.run("dispatcher", "--backend", "slurm", "--controller", "tcp://127.0.0.1:9",
               "--gpus", "0,1")
    assert p.returncode == 2 and "--max-gpus" in p.stderr
    p = jz.run("dispatcher", "--backend", "slurm", "--controller", "tcp://127.0.0.1:9",
               "--max-jobs", "0")
    assert p.returncode == 2 and "--max-jobs" in p.stderr
