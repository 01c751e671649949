"""The tpe and cmaes schedulers end to end: `jizhi run` on a small study
over tests/integration/progs/formula_trial.py (score best at lr = 0.1),
four trials at a time, checked in the SQLite database: every trial
completed with a legal lr, the scheduler's saved state holds every trial,
and a wrong option is refused by `study submit` with its field's name."""
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_pbt import formula_spec  # noqa: E402


@pytest.mark.parametrize("sched", [{"type": "tpe", "seed": 3, "n_startup": 4},
                                   {"type": "cmaes", "seed": 3, "popsize": 4}])
def test_study_runs_to_the_end(jz, sched):
    name = f"search-{sched['type']}"
    spec = formula_spec(name, sched, trials=8, parallel=4,
                        env={"FORMULA_STEPS": "3", "FORMULA_STEP_S": "0"})
    spec["space"]["width"] = {"type": "int", "low": 1, "high": 8}
    p = jz.run("run", jz.write_spec(spec), timeout=90)
    assert p.returncode == 0, p.stderr
    states = jz.sql("SELECT state FROM trials")
    assert len(states) == 8 and all(s == "completed" for (s,) in states), states
    params = jz.sql("SELECT name, value FROM params")
    lrs = [float(v) for n, v in params if n == "lr"]
    widths = [v for n, v in params if n == "width"]
    assert len(lrs) == 8 and all(1e-4 <= v <= 10 for v in lrs), lrs
    assert len(widths) == 8 and all(str(w).isdigit() and 1 <= int(w) <= 8 for w in widths)
    (state,) = jz.sql("SELECT sched_state FROM studies")[0]
    st = json.loads(state)["main"]
    assert st["count"] == 8 and st["pending"] == []
    if sched["type"] == "tpe":
        assert len(st["obs"]) == 8
    else:  # 8 results of popsize 4: one or two generations told (the
        # results of points drawn past a generation's 4 do not count)
        assert 1 <= st["gen"] <= 2 and st["lambda"] == 4
    best = max(v for (v,) in jz.sql(
        "SELECT m.value FROM metrics m WHERE m.name = 'score'"))
    assert 0 < best <= 1 and not math.isnan(best)


def test_bad_options_are_refused(jz):
    for sched, text in (({"type": "tpe", "group": True, "multivariate": False},
                         "scheduler.group: groups are multivariate"),
                        ({"type": "cmaes", "restart": "bipop"},
                         "scheduler.restart: must be \"ipop\" or \"none\"")):
        p = jz.run("study", "submit", jz.write_spec(formula_spec("bad", sched)), "--db", jz.db)
        assert p.returncode == 1 and text in p.stderr, p.stderr
