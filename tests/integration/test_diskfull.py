"""A starved controller (its database cannot grow: RLIMIT_FSIZE, the way a
full disk fails writes) stops serving instead of going on with state it
could not store; started again with room, it continues from the database:
every acknowledged metric is there, no metric without its trial, no trial
left running, the study finishes."""
import os
import resource
import signal
import subprocess

from conftest import JIZHI, PROGS, base_spec
from test_recovery import start_controller, start_dispatcher, stop


def test_disk_full_stops_the_controller_and_nothing_acknowledged_is_lost(jz):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ack_log = os.path.join(jz.dir, "acked.log")
    limit = 192 * 1024  # bytes any one file of the controller may reach

    def starve():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    log = open(os.path.join(jz.dir, "starved.log"), "w")
    ctl = subprocess.Popen([JIZHI, "controller", "--db", jz.db, "--bind", ep,
                            "--lost-timeout", "30"], cwd=jz.dir, env=jz.env,
                           stdout=subprocess.DEVNULL, stderr=log, preexec_fn=starve)
    disp = start_dispatcher(jz, ep)
    ctl2 = None
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        spec = base_spec("starved", ["python3", os.path.join(PROGS, "acked_reporter.py")],
                         trials=2, parallel=2,
                         env={"ACK_LOG": ack_log, "STEPS": "400", "STEP_SLEEP": "0.01"})
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        assert ctl.wait(timeout=120) == 1, "the starved controller should stop with status 1"
        text = open(os.path.join(jz.dir, "starved.log")).read()
        assert "cannot store this iteration" in text and "stopping" in text, text
        ctl2 = start_controller(jz, ep)  # room again
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 180,
                    "the study to finish after the restart")
        with open(ack_log) as f:
            acked = [tuple(map(int, line.split())) for line in f if line.strip()]
        stored = set(jz.sql("SELECT trial_id, step FROM metrics WHERE name='score'"))
        missing = [p for p in acked if p not in stored]
        assert acked and not missing, f"acknowledged but lost: {missing[:10]}"
        assert jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id NOT IN "
                      "(SELECT id FROM trials)")[0][0] == 0
        rows = jz.sql("SELECT state FROM trials")
        assert len(rows) == 2 and all(s == "completed" for (s,) in rows), rows
        done = jz.sql("SELECT COUNT(*) FROM events WHERE kind='completed'")[0][0]
        assert done == 2  # no event says more than the trials' rows
    finally:
        stop(*(p for p in (ctl, ctl2, disp) if p))
