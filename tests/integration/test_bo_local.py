"""bo's end-game (scheduler option `local`) through the daemons: a study
whose last half is searched in a trust region around the best trial, its
controller killed with kill -9 inside that phase; the restarted controller
restores the region and finishes the study. A bad `local` is refused with
its field's name."""
import json
import os

from conftest import PROGS, base_spec
from test_recovery import kill9_and_restart, start_controller, start_dispatcher, stop


def local_spec(name, trials, local):
    spec = base_spec(name, ["python3", os.path.join(PROGS, "mo_trial.py")], trials=trials,
                     parallel=1, env={"TRIAL_SLEEP": "0.2"})
    spec["objective"] = {"metric": "b", "mode": "min"}  # (1 - sqrt(x)) (1 + y)
    spec["scheduler"] = {"type": "bo", "seed": 5, "n_init": 4, "local": local}
    spec["space"] = {"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "y": {"type": "float", "low": 0.0, "high": 1.0}}
    return spec


def test_bo_local_phase_survives_kill9(jz):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep, 1)
    try:
        jz.run("study", "submit", jz.write_spec(local_spec("loc", 14, 0.5)), check=0)
        # trials 8..14 are local; kill once the first local ones have ended
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='completed'")[0][0]
                    >= 9, 120, "nine trials")
        (state,) = jz.sql("SELECT sched_state FROM studies")[0]
        before = json.loads(state)["main"]
        assert "trust" in before
        ctl = kill9_and_restart(jz, ctl, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish")
        (state,) = jz.sql("SELECT sched_state FROM studies")[0]
        st = json.loads(state)["main"]
        assert len(st["obs"]) == 14 and st["count"] == 14
        tr = st["trust"]
        assert 1 / 256 <= tr["len"] <= 0.8 and tr["succ"] >= 0 and tr["fail"] >= 0
        best = min(v for (v,) in jz.sql(
            "SELECT m.value FROM metrics m JOIN trials t ON t.id=m.trial_id "
            "WHERE t.state='completed' AND m.name='b'"))
        assert best < 0.05  # the minimum is 0 at x = 1, y = 0
    finally:
        stop(ctl, disp)


def test_bad_local_option_is_refused(jz):
    for bad, text in ((1.5, "scheduler.local: must be a number from 0 to 1"),
                      ("end", "scheduler.local: ")):
        p = jz.run("study", "submit", jz.write_spec(local_spec("bad", 4, bad)), "--db", jz.db)
        assert p.returncode == 1 and text in p.stderr, p.stderr
