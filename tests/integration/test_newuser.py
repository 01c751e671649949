"""What a new user hit (issue: install, one trial number, honest
acknowledgements, readable numbers): each case failed before its fix."""
import csv
import io
import json
import os
import re
import subprocess

from conftest import JIZHI, PROGS, base_spec


def test_one_trial_number_everywhere(jz):
    spec = base_spec("ids", ["sh", "-c", "jizhi report score={x}"], trials=4, parallel=1)
    p = jz.run("run", jz.write_spec(spec), check=0)
    m = re.search(r"best trial (\d+): score=", p.stdout)
    assert m, p.stdout
    best = int(m.group(1))
    # the number printed is the one `trial show` takes, and it is the best
    (best_id,) = jz.sql("SELECT id FROM trials ORDER BY value DESC LIMIT 1")[0]
    assert best == best_id
    show = jz.run("trial", "show", str(best), check=0).stdout
    assert re.search(rf"^id\s+{best}$", show, re.M)
    # the progress line names the best by the same number
    assert re.search(rf"\(trial {best}\)", p.stderr)
    # study show and trial list: same columns, keyed by that id
    shown = jz.run("study", "show", "ids", check=0).stdout.splitlines()
    hdr_show = next(l for l in shown if l.startswith("ID ")).split()
    # and study show names the best by that id too
    assert any(l.startswith(f"best: trial {best} ") for l in shown), shown
    hdr_list = jz.run("trial", "list", "ids", check=0).stdout.splitlines()[0].split()
    assert hdr_show == hdr_list and hdr_show[0] == "ID"


def test_numbers_and_times_are_readable(jz):
    spec = base_spec("nums", ["sh", "-c", "jizhi report score=0.8728"], trials=1, parallel=1)
    spec["space"] = {"x": {"type": "float", "low": 0.1, "high": 0.2}}
    jz.run("run", jz.write_spec(spec), check=0)
    (text,) = jz.sql("SELECT spec FROM studies")[0]
    assert '"high":0.2' in text and '"low":0.1' in text, text
    shown = json.loads(jz.run("study", "show", "nums", "--json", check=0).stdout)
    assert shown["spec"]["space"]["x"]["high"] == 0.2
    out = jz.run("study", "export", "nums", "--format", "csv", check=0).stdout
    row = next(csv.DictReader(io.StringIO(out)))
    assert row["metric_score"] == "0.8728" and row["value"] == "0.8728"
    assert float(row["param_x"]) == json.loads(jz.run("trial", "show", "1", "--json",
                                                      check=0).stdout)["params"]["x"]
    assert len(row["param_x"]) <= 19  # shortest text, not %.17g padding
    show = jz.run("trial", "show", "1", check=0).stdout
    assert re.search(r"^created\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$", show, re.M)
    assert re.search(r"^ended\s+\d{4}-", show, re.M)
    assert re.search(r"^checkpoint\s+-$", show, re.M)
    assert "e+09" not in show


def test_a_pending_trial_shows_dashes_not_zeros(jz):
    # `sleep` ignores the stop: a 2 s kill grace instead of 10 s
    jz.env["JIZHI_STOP_GRACE_S"] = "2"
    spec = base_spec("pend", ["sleep", "30"], trials=2, parallel=1, timeout_s=60)
    proc = jz.popen("run", jz.write_spec(spec), "--db", jz.db)
    try:
        jz.wait_for(lambda: len(jz.sql("SELECT id FROM trials WHERE state='running'")) == 1,
                    60, "a running trial")
        (tid,) = jz.sql("SELECT id FROM trials WHERE state='running'")[0]
        show = jz.run("trial", "show", str(tid), check=0).stdout
        for key in ("ended", "exit_code", "exit_how", "last_step"):
            assert re.search(rf"^{key}\s+-$", show, re.M), (key, show)
    finally:
        proc.terminate()  # a clean stop: `sleep` ignores it and is killed after a grace
        proc.wait(90)


def test_failed_trials_say_why_in_the_summary_and_study_show(jz):
    spec = base_spec("broken", ["sh", "-c", "echo 'cannot open libfoo.so' >&2; exit 3"],
                     trials=2, parallel=1)
    p = jz.run("run", jz.write_spec(spec))
    assert "2 failed" in p.stdout
    assert re.search(r"failed: exited with status 3; stderr: cannot open libfoo.so \(2 trials",
                     p.stdout), p.stdout
    show = jz.run("study", "show", "broken", check=0).stdout
    assert "failed trials:" in show and "exited with status 3" in show


def test_a_trial_without_the_objective_says_so(jz):
    spec = base_spec("noobj", ["sh", "-c", "jizhi report other=1"], trials=1, parallel=1)
    p = jz.run("run", jz.write_spec(spec))
    assert "exited without reporting its objective metric 'score'" in p.stdout, p.stdout


def test_pause_acknowledged_only_when_true(jz):
    """A program that ignores instructions: its pause is carried out by the
    helper (no progress while paused) and its resume lets it go on. (The
    other instructions' honest acknowledgements: tests/test_jz_helper.c.)"""
    from test_control import daemons, held_while_paused, two_running_trials
    from test_recovery import stop

    ep, ctl, disp = daemons(jz)
    try:
        # two trials: the second, not paused, is the control that shows time passing
        spec = base_spec("ignore", ["python3", f"{PROGS}/ignoring_trial.py"], trials=2,
                         parallel=2, env={"STEPS": "400"})
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid, control = two_running_trials(jz)
        jz.run("trial", "pause", str(tid), check=0)
        # acknowledged a pause: no progress while the control trial makes some
        s2 = held_while_paused(jz, tid, control)
        jz.run("trial", "resume", str(tid), check=0)
        jz.wait_for(lambda: jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?",
                                   tid)[0][0] > s2, 30, "progress after resume")
        events = json.loads(jz.run("study", "events", "ignore", "--json", check=0).stdout)
        pause = [e for e in events if e["kind"] == "instruction"
                 and e["detail"]["kind"] == "pause"][0]
        assert pause["applied"] is True and "helper" in (pause["result"] or ""), pause
        jz.run("trial", "stop", str(tid), check=0)
        jz.run("trial", "stop", str(control), check=0)
    finally:
        stop(ctl, disp)


def test_exports_show_live_changes_curves_and_hide_internal_metrics(jz):
    from test_control import daemons, live_spec, running_trial
    from test_recovery import stop

    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("exp", steps="30")), check=0)
        tid = running_trial(jz)
        (sampled,) = jz.sql("SELECT value FROM params WHERE trial_id=? AND generation=0 "
                            "AND name='lr'", tid)[0]
        jz.run("trial", "set", str(tid), "lr=0.03", check=0)
        jz.wait_trial_state(tid, "completed", 60, "the trial to complete")
    finally:
        stop(ctl, disp)
    out = jz.run("study", "export", "exp", "--format", "csv", check=0).stdout
    row = next(csv.DictReader(io.StringIO(out)))
    assert float(row["param_lr"]) == 0.03
    assert float(row["sampled_lr"]) == float(sampled)
    assert int(row["generation"]) >= 1
    js = json.loads(jz.run("study", "export", "exp", "--format", "json", check=0).stdout)
    assert js[0]["sampled"]["lr"] == float(sampled) and js[0]["params"]["lr"] == 0.03
    curves = list(csv.DictReader(io.StringIO(
        jz.run("study", "export", "exp", "--format", "curves", check=0).stdout)))
    lr_points = [r for r in curves if r["metric"] == "lr"]
    n = jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=? AND name='lr'", tid)[0][0]
    assert len(lr_points) == n and n > 0
    assert [int(r["step"]) for r in lr_points] == sorted(int(r["step"]) for r in lr_points)
    assert {float(r["value"]) for r in lr_points} >= {0.03}
    assert all(re.match(r"\d{4}-\d\d-\d\dT", r["time"]) for r in curves)
    bad = jz.run("study", "export", "exp", "--format", "xml")
    assert bad.returncode == 2 and "csv, json or curves" in bad.stderr


def test_internal_metrics_only_with_all(jz):
    spec = base_spec("internal", ["sh", "-c", "jizhi report score=1 grad_sqnorm_small=2 "
                                  "batch_big=64"], trials=1, parallel=1)
    jz.run("run", jz.write_spec(spec), check=0)
    hdr = jz.run("study", "export", "internal", check=0).stdout.splitlines()[0].split(",")
    assert "metric_score" in hdr and "metric_grad_sqnorm_small" not in hdr
    assert "metric_batch_big" not in hdr
    hdr = jz.run("study", "export", "internal", "--all", check=0).stdout.splitlines()[0]
    assert "metric_grad_sqnorm_small" in hdr and "metric_batch_big" in hdr


def test_trial_logs_follow_until_the_trial_ends(jz):
    spec = base_spec("follow", ["sh", "-c", "for i in 1 2 3 4 5; do echo line$i; "
                                "echo err$i >&2; sleep 0.3; done; jizhi report score=1"],
                     trials=1, parallel=1)
    proc = jz.popen("run", jz.write_spec(spec), "--db", jz.db)
    try:
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials")[0][0] == "running", 60,
                    "the trial to run")
        p = jz.run("trial", "logs", "1", "-f", timeout=60, check=0)
        assert p.stdout.split() == ["line1", "line2", "line3", "line4", "line5"]
        assert p.stderr.split() == ["err1", "err2", "err3", "err4", "err5"]
        assert jz.sql("SELECT state FROM trials")[0][0] == "completed"
    finally:
        proc.wait(60)


def test_a_broken_command_stops_the_study_after_failures_in_a_row(jz):
    spec = base_spec("broken-cmd", ["sh", "-c", "echo 'libjizhi.so: cannot open' >&2; exit 127"],
                     trials=20, parallel=1)
    spec["budget"]["max_consecutive_failures"] = 3
    p = jz.run("run", jz.write_spec(spec), timeout=120)
    assert p.returncode == 1
    rows = jz.sql("SELECT state FROM trials")
    assert len(rows) == 3 and all(s == "failed" for (s,) in rows)
    assert jz.sql("SELECT state FROM studies") == [("stopped",)]
    ev = json.loads(jz.run("study", "events", "broken-cmd", "--json", check=0).stdout)
    stop = [e for e in ev if e["kind"] == "study_stopped"][0]
    assert "3 trials failed in a row" in stop["detail"]["reason"]
    assert "libjizhi.so: cannot open" in p.stdout
    bad = base_spec("bad-budget", ["true"])
    bad["budget"]["max_consecutive_failures"] = -1
    r = jz.run("run", jz.write_spec(bad, "bad.json"))
    assert r.returncode == 1 and "budget.max_consecutive_failures" in r.stderr


def test_study_stop_ends_the_run_with_true_states_and_run_continues_it(jz):
    # its trials never read their stop: a 2 s kill grace instead of 10 s
    jz.env["JIZHI_STOP_GRACE_S"] = "2"
    spec = base_spec("stoppable", ["python3", f"{PROGS}/ignoring_trial.py"], trials=2,
                     parallel=1, env={"STEPS": "60"})
    path = jz.write_spec(spec)
    proc = jz.popen("run", path, "--db", jz.db)
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0, 60, "a report")
    jz.run("study", "stop", "stoppable", check=0)
    proc.wait(90)
    states = [s for (s,) in jz.sql("SELECT state FROM trials")]
    assert "running" not in states and "stopped" in states, states
    assert jz.sql("SELECT state FROM studies") == [("stopped",)]
    r = jz.run("study", "resume", "stoppable")
    assert r.returncode == 1 and "jizhi run SPEC.json" in r.stderr
    again = jz.run("run", path, "--db", jz.db, timeout=120, check=0)
    assert "continuing study stoppable" in again.stderr
    assert [s for (s,) in jz.sql("SELECT state FROM trials")] == ["completed", "completed"]


def test_ctrl_c_leaves_no_study_running_and_a_study_submitted_to_a_run_is_stopped(jz):
    import signal
    # its trials never read their stop: a 2 s kill grace instead of 10 s
    jz.env["JIZHI_STOP_GRACE_S"] = "2"

    spec = base_spec("own", ["python3", f"{PROGS}/ignoring_trial.py"], trials=1, parallel=1,
                     env={"STEPS": "400"})
    other = base_spec("guest", ["python3", f"{PROGS}/ignoring_trial.py"], trials=1,
                      parallel=1, env={"STEPS": "400"})
    proc = jz.popen("run", jz.write_spec(spec), "--db", jz.db, "--slots", "2")
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0, 60, "a report")
    jz.run("study", "submit", jz.write_spec(other, "guest.json"), check=0)
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials")[0][0] == 2, 60, "the guest trial")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "run the same command again" in err
    assert "stopping study guest" in err
    assert sorted(jz.sql("SELECT name, state FROM studies")) == [("guest", "stopped"),
                                                                 ("own", "stopped")]
    assert all(s != "running" for (s,) in jz.sql("SELECT state FROM trials"))


def test_relative_paths_resolved_by_the_submitting_command(jz, tmp_path):
    """The shipped example submitted from another folder: its relative paths
    are resolved where it is submitted, not in the dispatcher's folder."""
    from conftest import ROOT
    from test_control import daemons
    from test_recovery import stop

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ep, ctl, disp = daemons(jz)  # the dispatcher runs in the test's folder
    try:
        spec = json.load(open(f"{ROOT}/examples/python-objective.json"))
        spec["budget"] = {"trials": 2, "parallel": 2}
        spec_path = os.path.join(ROOT, "examples", "python-objective.json")
        p = subprocess.run([JIZHI, "study", "submit", spec_path, "--db", jz.db],
                           cwd=elsewhere, env=jz.env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish")
        states = [s for (s,) in jz.sql("SELECT state FROM trials")]
        assert states and all(s == "completed" for s in states), states
        (stored,) = jz.sql("SELECT spec FROM studies")[0]
        cmd = json.loads(stored)["trial"]["command"]
        assert cmd[1] == os.path.join(ROOT, "examples", "objective.py")
    finally:
        stop(ctl, disp)
    # a relative path that exists nowhere is refused, naming the field
    bad = base_spec("missing-file", ["python3", "no/such/file.py"])
    r = jz.run("study", "submit", jz.write_spec(bad, "bad.json"))
    assert r.returncode == 1 and 'trial.command[1]: "no/such/file.py" is not found' in r.stderr


def test_early_stopping_without_its_resource_warns(jz):
    cmd = ["sh", "-c", "for s in 1 2 3 4 5; do jizhi report --step $s score={x}; done"]
    spec = base_spec("no-epoch", cmd, trials=2, parallel=1)
    spec["early_stopping"] = {"type": "asha", "grace": 1}  # resource: epoch, never reported
    p = jz.run("run", jz.write_spec(spec), check=0)
    assert "warning: early_stopping:" in p.stdout and "never 'epoch'" in p.stdout
    show = jz.run("study", "show", "no-epoch", check=0).stdout
    assert "warning: early_stopping:" in show
    ev = json.loads(jz.run("study", "events", "no-epoch", "--json", check=0).stdout)
    assert len([e for e in ev if e["kind"] == "warning"]) == 1  # once per study
    watch = jz.run("watch", "no-epoch", check=0).stdout  # not a tty: plain lines
    assert "warning: early_stopping:" in watch
    # a trial that reports the resource: no warning
    cmd = ["sh", "-c", "for s in 1 2 3 4 5; do jizhi report --step $s score={x} epoch=$s; done"]
    spec = base_spec("with-epoch", cmd, trials=2, parallel=1)
    spec["early_stopping"] = {"type": "asha", "grace": 1}
    p = jz.run("run", jz.write_spec(spec, "ok.json"), check=0)
    assert "warning" not in p.stdout


def test_study_events_text_has_time_who_what_and_outcome(jz):
    from test_control import daemons, live_spec, running_trial
    from test_recovery import stop

    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("ev", steps="400")), check=0)
        tid = running_trial(jz)
        jz.run("trial", "set", str(tid), "lr=0.05", check=0)
        jz.run("trial", "set", str(tid), "color=blue")  # refused by the program
        jz.run("trial", "stop", str(tid), check=0)
    finally:
        stop(ctl, disp)
    out = jz.run("study", "events", "ev", check=0).stdout.splitlines()
    assert out[0].split()[:5] == ["TIME", "WHO", "TRIAL", "WHAT", "OUTCOME"]
    line = [l for l in out if "name=\"lr\"" in l][0]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z\s+cli(:\S+)?\s+trial " + str(tid), line)
    assert re.search(r"set name=\"lr\" value=0.05\s+applied in [0-9.]+ ms", line), line
    refused = [l for l in out if "color" in l][0]
    assert "refused in" in refused and "unknown parameter color" in refused, refused


def test_spec_conflicts_and_empty_bo_space_are_explained(jz):
    spec = base_spec("conflict", ["sh", "-c", "jizhi report score={x}"], trials=2, parallel=1)
    path = jz.write_spec(spec)
    jz.run("run", path, check=0)
    spec["budget"]["trials"] = 3
    r = jz.run("run", jz.write_spec(spec), check=None)
    assert r.returncode == 1
    assert "budget.trials: stored 2, given 3" in r.stderr, r.stderr
    empty = base_spec("empty-bo", ["sh", "-c", "jizhi report score=1"])
    empty["space"] = {}
    empty["scheduler"] = {"type": "bo", "seed": 1}
    r = jz.run("run", jz.write_spec(empty, "empty.json"))
    assert r.returncode == 1 and "space: empty, so bo has nothing to search" in r.stderr
    assert not jz.sql("SELECT name FROM studies WHERE name='empty-bo'")


def test_remote_reads_through_the_controller(jz, tmp_path):
    """list, show, export, events, trial list/show/logs (-f) and watch from a
    folder with no database file, through --controller over TCP, give what
    the database file gives."""
    import socket
    from test_recovery import start_controller, start_dispatcher, stop

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ep = f"tcp://127.0.0.1:{port}"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    remote = tmp_path / "remote"
    remote.mkdir()
    env = {k: v for k, v in jz.env.items() if k != "JIZHI_DB"}

    def rj(*args, check=0):
        p = subprocess.run([JIZHI, *args, "--controller", ep], cwd=remote, env=env,
                           capture_output=True, text=True, timeout=60)
        assert check is None or p.returncode == check, p.stderr
        return p

    try:
        cmd = ["sh", "-c", "echo out-{x}; echo err-line >&2; sleep 1; jizhi report score={x}"]
        jz.run("study", "submit", jz.write_spec(base_spec("far", cmd, trials=3, parallel=2)),
               check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=1")[0][0] == "running",
                    60, "trial 1 running")
        f = rj("trial", "logs", "1", "-f")  # follows until the trial ends
        assert f.stdout.startswith("out-") and f.stderr.strip() == "err-line"
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish")
        assert not os.path.exists(remote / "jizhi.db")
        for args in (["study", "list"], ["study", "show", "far"], ["study", "events", "far"],
                     ["study", "export", "far"], ["study", "export", "far", "--format", "json"],
                     ["trial", "list", "far"], ["trial", "show", "2"], ["trial", "logs", "2"],
                     ["study", "show", "far", "--json"]):
            local = jz.run(*args, check=0)
            far = rj(*args)
            assert far.stdout == local.stdout, args
            assert far.stderr == local.stderr, args
        assert "out-" in rj("trial", "logs", "3").stdout
        assert "err-line" in rj("trial", "logs", "3", "--stderr").stdout
        w = rj("watch", "far")
        assert "study far finished: done 3/3" in w.stdout
        # errors name what is wrong
        assert "no study named" in rj("study", "show", "nope", check=1).stderr
        assert "no trial 99" in rj("trial", "show", "99", check=1).stderr
        assert "--format curves reads the database file" in rj(
            "study", "export", "far", "--format", "curves", check=1).stderr
    finally:
        stop(ctl, disp)
    # the dispatcher is gone: its logs cannot be read from afar, and it says so
    ctl = start_controller(jz, ep)
    try:
        assert "not connected" in rj("trial", "logs", "1", check=1).stderr
    finally:
        stop(ctl)


def test_run_dirs_left_by_kill_9_are_swept(jz):
    import glob
    import signal

    before = set(glob.glob("/tmp/jizhi-run-*"))
    spec = base_spec("killed", ["sleep", "30"], trials=1, parallel=1)
    proc = jz.popen("run", jz.write_spec(spec), "--db", jz.db)
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0] == 1,
                60, "a running trial")
    mine = [d for d in set(glob.glob("/tmp/jizhi-run-*")) - before
            if open(f"{d}/pid").read().strip() == str(proc.pid)]
    assert len(mine) == 1
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    subprocess.run(["pkill", "-f", "sleep 30"], check=False)
    assert os.path.isdir(mine[0])  # left behind by kill -9
    # another run sweeps it; a directory of a live process stays
    import uuid
    alive = "/tmp/jizhi-run-" + uuid.uuid4().hex[:6]  # named as mkdtemp names them
    os.mkdir(alive)
    with open(f"{alive}/pid", "w") as f:
        f.write(f"{os.getpid()}\n")
    try:
        live = base_spec("after", ["sh", "-c", "jizhi report score=1"], trials=1, parallel=1)
        jz.run("run", jz.write_spec(live, "after.json"), "--db", os.path.join(jz.dir, "b.db"),
               check=0)
        assert not os.path.exists(mine[0])
        assert os.path.exists(f"{alive}/pid")
    finally:
        os.unlink(f"{alive}/pid")
        os.rmdir(alive)


def test_a_stale_attempt_is_refused_and_killed(jz):
    """A machine hangs (its dispatcher and trial stopped with SIGSTOP): the
    trial is declared lost and run again on another dispatcher with a new
    token. When the machine comes back still running the old attempt, that
    attempt's reports are refused and the controller has it killed; the
    result is the new attempt's."""
    import signal
    from test_recovery import start_controller, stop

    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep, lost="2")
    logs = os.path.join(jz.dir, "logs")
    a = jz.popen("dispatcher", "--controller", ep, "--slots", "1", "--name", "a",
                 "--log-dir", logs)
    b = None
    try:
        # 120 steps (6 s): the stale attempt, stopped after its first,
        # is still running when its machine comes back; the new one ends soon
        spec = base_spec("stale", ["python3", f"{PROGS}/ignoring_trial.py"], trials=1,
                         parallel=1, env={"STEPS": "120"})
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0, 60, "a report")
        (token0, pid0) = jz.sql("SELECT token, pid FROM trials")[0]
        a.send_signal(signal.SIGSTOP)
        os.kill(pid0, signal.SIGSTOP)
        b = jz.popen("dispatcher", "--controller", ep, "--slots", "1", "--name", "b",
                     "--log-dir", logs)
        jz.wait_for(lambda: jz.sql("SELECT attempt, dispatcher FROM trials")[0] == (1, "b"),
                    60, "the retry on dispatcher b")
        (token1,) = jz.sql("SELECT token FROM trials")[0]
        assert token1 != token0  # a new attempt, a new token
        # the machine comes back: first the stale trial, whose reports the
        # controller refuses (it talks to the controller directly) ...
        os.kill(pid0, signal.SIGCONT)
        ctl_log = os.path.join(jz.dir, "controller.log")
        jz.wait_for(lambda: "for trial 1: wrong token" in open(ctl_log).read(), 60,
                    "the stale attempt's reports to be refused")
        # ... then its dispatcher, which still lists it as running
        a.send_signal(signal.SIGCONT)
        jz.wait_for(lambda: subprocess.run(["kill", "-0", str(pid0)],
                                           capture_output=True).returncode != 0,
                    60, "the stale attempt to be killed")
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials")[0][0] == "completed", 120,
                    "the new attempt to complete")
        # no point of the old attempt was stored after the retry
        (n_old_after,) = jz.sql(
            "SELECT COUNT(*) FROM metrics m JOIN events e ON e.kind='retry' "
            "WHERE m.attempt=0 AND m.time > e.time")[0]
        assert n_old_after == 0
        log = open(os.path.join(jz.dir, "controller.log")).read()
        assert "a stale attempt: killing it" in log
        assert "for trial 1: wrong token" in log  # its reports were refused
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
        subprocess.run(["kill", "-CONT", str(pid0)], capture_output=True)
        stop(*(p for p in (ctl, a, b) if p))


def test_database_and_endpoint_files_are_the_owners_alone(jz):
    import stat

    spec = base_spec("private", ["sh", "-c", "sleep 1; jizhi report score=1"], trials=1,
                     parallel=1)
    proc = jz.popen("run", jz.write_spec(spec), "--db", jz.db)
    try:
        ep = jz.db + ".endpoint"
        jz.wait_for(lambda: os.path.exists(ep), 60, "the endpoint file")
        for path in (jz.db, ep, jz.db + "-wal"):
            if os.path.exists(path):
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    finally:
        proc.wait(60)
    assert stat.S_IMODE(os.stat(jz.db).st_mode) == 0o600
