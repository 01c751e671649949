"""Daemons: kill -9 of the controller in the middle of a study loses no
acknowledged metric and the restarted controller finishes the study; a
trial with a wrong token is refused."""
import json
import os
import signal
import time

from conftest import PROGS, base_spec


def start_controller(jz, ep, lost="20"):
    # plain TCP needs --insecure (test_auth.py covers CURVE), on the clients'
    # side too: JIZHI_SERVER_KEY=none is the commands' --insecure
    insecure = ["--insecure"] if ep.startswith("tcp://") else []
    if insecure:
        jz.env["JIZHI_SERVER_KEY"] = "none"
    ctl = jz.popen("controller", "--db", jz.db, "--bind", ep, "--lost-timeout", lost,
                   "--log", os.path.join(jz.dir, "controller.log"), *insecure)
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the controller's endpoint file")
    return ctl


def start_dispatcher(jz, ep, slots=2, name="m1"):
    insecure = ["--insecure"] if ep.startswith("tcp://") else []
    return jz.popen("dispatcher", "--controller", ep, "--slots", str(slots), "--name", name,
                    "--log-dir", os.path.join(jz.dir, "logs"), *insecure)


def kill9_and_restart(jz, ctl, ep):
    """kill -9 of controller `ctl`, then a new controller on the same
    database and endpoint (returned, for the caller to stop)."""
    ctl.send_signal(signal.SIGKILL)
    ctl.wait(timeout=10)
    time.sleep(0.5)
    return start_controller(jz, ep)


def stop(*procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except Exception:
            p.kill()


def test_kill9_controller_then_restart_finishes_with_every_acked_metric(jz):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ack_log = os.path.join(jz.dir, "acked.log")
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    ctl2 = None
    try:
        spec = base_spec("recover", ["python3", os.path.join(PROGS, "acked_reporter.py")],
                         trials=4, parallel=2, env={"ACK_LOG": ack_log, "STEPS": "40"})
        jz.run("study", "submit", jz.write_spec(spec), check=0)

        def acked():
            if not os.path.exists(ack_log):
                return []
            with open(ack_log) as f:
                return [tuple(map(int, line.split())) for line in f if line.strip()]

        jz.wait_for(lambda: len(acked()) >= 15, 60, "some acknowledged metrics")
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=10)
        before = len(acked())
        time.sleep(1.0)  # trials keep running and queue reports meanwhile
        ctl2 = start_controller(jz, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish after the restart")
        points = acked()
        assert len(points) >= before
        stored = set(jz.sql("SELECT trial_id, step FROM metrics WHERE name='score'"))
        missing = [p for p in points if p not in stored]
        assert not missing, f"acknowledged but lost: {missing[:10]}"
        rows = jz.sql("SELECT state, attempt FROM trials")
        assert len(rows) == 4 and all(s == "completed" for s, _ in rows), rows
        # the trials running across the restart reconnected and kept running
        assert all(a == 0 for _, a in rows), rows
        # no point stored twice despite resends
        dups = jz.sql("SELECT COUNT(*) FROM (SELECT trial_id, attempt, step FROM metrics "
                      "WHERE name='score' GROUP BY trial_id, attempt, step HAVING COUNT(*) > 1)")
        assert dups[0][0] == 0
    finally:
        stop(*(p for p in (ctl, ctl2, disp) if p))


def test_kill9_after_large_batches_keeps_every_acked_point_exactly(jz):
    """Batches of 640 points in one message (score and aux, NaN among
    them), the controller killed -9 while they flow: every acknowledged
    point is in the store once, with its value (issue 43: points read
    without jansson, inserted 64 rows per statement)."""
    ep = f"ipc://{jz.dir}/ctl.sock"
    ack_log = os.path.join(jz.dir, "acked.log")
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    ctl2 = None
    per = 320
    try:
        spec = base_spec("batches", ["python3", os.path.join(PROGS, "acked_reporter.py")],
                         trials=2, parallel=2,
                         env={"ACK_LOG": ack_log, "STEPS": "12", "PER_FLUSH": str(per),
                              "STEP_SLEEP": "0.02"})
        jz.run("study", "submit", jz.write_spec(spec), check=0)

        def acked():
            if not os.path.exists(ack_log):
                return []
            with open(ack_log) as f:
                return [tuple(map(int, line.split())) for line in f if line.strip()]

        jz.wait_for(lambda: len(acked()) >= 3 * per, 60, "some acknowledged batches")
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=10)
        before = len(acked())
        ctl2 = start_controller(jz, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish after the restart")
        points = acked()
        assert len(points) >= before
        assert len(points) == 2 * 12 * per  # both trials flushed every batch
        xs = {t: json.loads(v) for t, v in
              jz.sql("SELECT trial_id, value FROM params WHERE name='x'")}
        score = jz.sql("SELECT trial_id, step, value FROM metrics WHERE name='score'")
        stored = {(t, s) for t, s, _ in score}
        missing = [p for p in points if p not in stored]
        assert not missing, f"acknowledged but lost: {missing[:10]}"
        assert len(score) == len(stored) == len(points)  # each once
        assert all(v == xs[t] + s for t, s, v in score)
        aux = jz.sql("SELECT step, value FROM metrics WHERE name='aux'")
        assert len(aux) == len(points)
        assert all((v is None) if s % 7 == 0 else v == s * 0.25 for s, v in aux)
    finally:
        stop(*(p for p in (ctl, ctl2, disp) if p))


def test_a_set_acked_to_the_restarted_controller_is_shown_applied(jz):
    """A `trial set` the trial takes before the controller is killed -9 and
    acknowledges to the restarted one: the restart resolved its event as not
    applied, "the controller restarted before it was resolved" (`study
    events` showed "refused" for a set the trial runs with); the late ack
    resolves it again as the trial says, and the value is the trial's next
    params generation."""
    ep = f"ipc://{jz.dir}/ctl.sock"
    got, go = os.path.join(jz.dir, "got"), os.path.join(jz.dir, "go")
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep, slots=1)
    ctl2 = None
    try:
        spec = base_spec("late", ["python3", os.path.join(PROGS, "late_ack_trial.py")],
                         trials=1, parallel=1, env={"GOT": got, "GO": go})
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics") != [(0,)], 30,
                    "the trial to report")
        ((tid,),) = jz.sql("SELECT id FROM trials")
        jz.run("trial", "set", str(tid), "lr=0.3", "--no-wait", check=0)
        jz.wait_for(lambda: os.path.exists(got), 30, "the trial to take the set")
        ctl2 = kill9_and_restart(jz, ctl, ep)
        why = "the controller restarted before it was resolved"
        instr = "SELECT applied, result FROM events WHERE kind='instruction'"
        jz.wait_for(lambda: jz.sql(instr) == [(0, why)], 20, "the restart's resolution")
        open(go, "w").close()
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the study to finish")
        ((applied, result),) = jz.sql(instr)
        assert applied == 1 and result != why, (applied, result)
        lines = [x for x in jz.run("study", "events", "late", check=0).stdout.splitlines()
                 if 'set name="lr" value=0.3' in x]
        assert len(lines) == 1 and "applied" in lines[0] and why not in lines[0], lines
        assert jz.sql("SELECT generation, value FROM params WHERE trial_id=? AND "
                      "name='lr'", tid) == [(1, "0.3")]
        assert jz.sql("SELECT state FROM trials") == [("completed",)]
    finally:
        stop(*(p for p in (ctl, ctl2, disp) if p))


def test_wrong_token_is_refused(jz):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep, 1)
    try:
        spec = base_spec("tokens", ["sleep", "20"], trials=1, parallel=1)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials")[0][0] == "running", 30,
                    "the trial to run")
        (tid, token), = jz.sql("SELECT id, token FROM trials")
        with open(os.path.join(jz.dir, "controller.log")) as f:
            assert "serving " + ep in f.read()
        env = dict(jz.env, JIZHI_ENDPOINT=ep, JIZHI_TRIAL=str(tid), JIZHI_TOKEN="0" * 32,
                   JIZHI_STUDY="tokens", JIZHI_CLOSE_TIMEOUT_MS="2000")
        import subprocess
        from conftest import JIZHI
        p = subprocess.run([JIZHI, "report", "score=1"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 1, p.stderr
        assert jz.sql("SELECT COUNT(*) FROM metrics")[0][0] == 0
        with open(os.path.join(jz.dir, "controller.log")) as f:
            assert "wrong token" in f.read()  # refusals are logged
        # the right token is accepted
        env["JIZHI_TOKEN"] = token
        p = subprocess.run([JIZHI, "report", "score=2"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        assert jz.sql("SELECT value FROM metrics WHERE name='score'") == [(2.0,)]
        jz.run("trial", "stop", str(tid), check=0)
    finally:
        stop(ctl, disp)


def test_trial_that_ends_while_the_controller_is_down_completes(jz):
    """Its exit is reported after the restarted controller registers the
    dispatcher: the trial completes once, it is not taken for lost."""
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep, 1)
    ctl2 = None
    try:
        # the trial waits for the go file, written once the controller is down
        pidf, go = os.path.join(jz.dir, "trial.pid"), os.path.join(jz.dir, "go")
        spec = base_spec("down", ["sh", "-c", f"echo $$ > {pidf}; jizhi report --step 1 "
                                  f"score=1 && while [ ! -e {go} ]; do sleep 0.02; done"],
                         trials=1, parallel=1)
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] == 1, 30, "the report")
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=10)
        pid = int(open(pidf).read())
        open(go, "w").close()
        # the trial exits meanwhile: its process is gone (reaped by the dispatcher)
        jz.wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 30, "the trial to exit")
        ctl2 = start_controller(jz, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the study to finish")
        assert jz.sql("SELECT state, attempt, value FROM trials") == [("completed", 0, 1.0)]
        assert jz.sql("SELECT COUNT(*) FROM events WHERE kind='retry'")[0][0] == 0
    finally:
        stop(*(p for p in (ctl, ctl2, disp) if p))


def test_kill9_of_jizhi_run_then_run_again_finishes_without_rerunning(jz):
    """kill -9 of `jizhi run` itself (controller and dispatcher in one
    process): running it again on the same database continues the study;
    trials that had completed are kept as they were, not rerun, and the
    study ends with exactly its budget of trials."""
    cmd = ["sh", "-c", "for s in 1 2 3 4 5 6; do jizhi report --step $s score={x}; "
           "sleep 0.2; done"]
    spec = base_spec("killed-run", cmd, trials=8, parallel=2)
    path = jz.write_spec(spec)
    run = jz.popen("run", path)
    try:
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='completed'")[0][0]
                    >= 2, 60, "two completed trials")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
    before = {r[0]: r[1:] for r in jz.sql(
        "SELECT id, attempt, value, ended FROM trials WHERE state='completed'")}
    assert len(before) >= 2
    p = jz.run("run", path, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = jz.sql("SELECT id, number, state, attempt, value, ended FROM trials ORDER BY number")
    assert [r[1] for r in rows] == list(range(8)), rows  # the budget, no extra trials
    assert all(r[2] == "completed" for r in rows), rows
    for tid, _, _, attempt, value, ended in rows:
        if tid in before:  # completed before the kill: untouched
            assert (attempt, value, ended) == before[tid]
        steps = [s for (s,) in jz.sql("SELECT step FROM metrics WHERE trial_id=? AND "
                                      "name='score' AND attempt=? ORDER BY step", tid, attempt)]
        assert steps == [1, 2, 3, 4, 5, 6], (tid, steps)
    assert "8 completed" in p.stdout, p.stdout
