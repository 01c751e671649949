"""Several objectives and constraints through the daemons: bo searches
with both objectives and a constraint metric, its state (with the other
objectives) survives a controller kill -9; study show, show --json,
export and the web API's /pareto mark the feasible Pareto set, checked
against a front computed here from the stored metrics."""
import csv
import io
import json
import os

from conftest import PROGS, base_spec
from test_recovery import kill9_and_restart, start_controller, start_dispatcher, stop
from webutil import http, serve


def mo_spec(name, trials, sched="bo"):
    spec = base_spec(name, ["python3", os.path.join(PROGS, "mo_trial.py")], trials=trials,
                     parallel=2, env={"TRIAL_SLEEP": "0.2"})
    spec["objective"] = [{"metric": "a", "mode": "min"}, {"metric": "b", "mode": "min"}]
    spec["constraints"] = [{"metric": "mem", "<=": 5}]
    spec["scheduler"] = {"type": sched, "seed": 4, **({"n_init": 4} if sched == "bo" else {})}
    spec["space"] = {"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "y": {"type": "float", "low": 0.0, "high": 1.0}}
    return spec


def front_here(jz):
    """Feasible non-dominated trial ids from the stored metrics."""
    rows = {}
    for tid, name, value in jz.sql(
            "SELECT m.trial_id, m.name, m.value FROM metrics m JOIN trials t ON t.id=m.trial_id "
            "WHERE t.state='completed'"):
        rows.setdefault(tid, {})[name] = value
    feas = {t: (m["a"], m["b"]) for t, m in rows.items() if m["mem"] <= 5}
    return {t for t, f in feas.items()
            if not any(g[0] <= f[0] and g[1] <= f[1] and g != f for g in feas.values())}, rows


def test_bo_two_objectives_with_a_constraint_survives_kill9_and_marks_the_front(jz):
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    try:
        jz.run("study", "submit", jz.write_spec(mo_spec("mo", 12)), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='completed'")[0][0]
                    >= 5, 90, "five trials")
        ctl = kill9_and_restart(jz, ctl, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish")
        # bo kept the other objective and the constraint metric with each observation
        (state,) = jz.sql("SELECT sched_state FROM studies")[0]
        obs = json.loads(state)["main"]["obs"]
        assert len(obs) == 12 and all(set(o["metrics"]) == {"b", "mem"} for o in obs)
        front, rows = front_here(jz)
        assert front
        # show --json marks exactly that front, and feasibility
        d = json.loads(jz.run("study", "show", "mo", "--json", check=0).stdout)
        marked = {t["id"] for t in d["trials"] if t.get("pareto")}
        assert marked == front
        for t in d["trials"]:
            assert t["feasible"] == (rows[t["id"]]["mem"] <= 5)
        out = jz.run("study", "show", "mo", check=0).stdout
        assert "Pareto set (not dominated, feasible):" in out
        assert "feasible: %d of 12 completed" % sum(m["mem"] <= 5 for m in rows.values()) in out
        # export: pareto and feasible columns
        rows_csv = list(csv.DictReader(io.StringIO(jz.run("study", "export", "mo", check=0).stdout)))
        assert {int(r["id"]) for r in rows_csv if r["pareto"] == "true"} == front
        assert all(r["feasible"] in ("true", "false") for r in rows_csv)
        # plot rings the front's points in the history panel
        jz.run("plot", "mo", "--db", jz.db, "--output", "mo.svg", check=0)
        with open(os.path.join(jz.dir, "mo.svg")) as f:
            svg = f.read()
        import re
        ringed = {int(t) for t in re.findall(r'<circle class="pareto" data-trial="(\d+)"', svg)}
        assert ringed == front and "Pareto set (%d)" % len(front) in svg
        # watch (no terminal: lines) names the Pareto set and the best feasible value
        out = jz.run("watch", "mo", "--db", jz.db, "--interval", "0.1", timeout=60,
                     check=0).stdout
        last = [ln for ln in out.splitlines() if ln.startswith("study mo finished")][-1]
        assert "best feasible a" in last
        assert {int(t) for t in last.split("Pareto set:")[1].split(",")[0].split()} == front
    finally:
        stop(ctl, disp)
    # the web API's front (no controller needed)
    p, url = serve(jz)
    try:
        st, j, _ = http("GET", url + "/api/studies/mo/pareto")
        assert st == 200
        assert j["objectives"] == [{"metric": "a", "mode": "min"}, {"metric": "b", "mode": "min"}]
        assert j["constraints"] == [{"metric": "mem", "<=": 5}]
        assert {t["id"] for t in j["pareto"]} == front
        for t in j["pareto"]:
            assert t["values"]["a"] == rows[t["id"]]["a"] and t["values"]["b"] == rows[t["id"]]["b"]
        st, j, _ = http("GET", url + "/api/studies/nope/pareto")
        assert st == 404
    finally:
        stop(p)


def test_bad_objective_lists_and_constraints_are_refused(jz):
    spec = mo_spec("bad", 2, "random")
    spec["objective"].append({"metric": "a", "mode": "max"})
    p = jz.run("study", "submit", jz.write_spec(spec), "--db", jz.db)
    assert p.returncode == 1 and "objective[2].metric: \"a\" is already an objective" in p.stderr
    spec = mo_spec("bad", 2, "random")
    spec["constraints"] = [{"metric": "mem"}]
    p = jz.run("study", "submit", jz.write_spec(spec), "--db", jz.db)
    assert p.returncode == 1 and "constraints[0]: needs exactly one bound" in p.stderr
    assert not os.path.exists(jz.db)


def test_dashboard_marks_the_pareto_set(jz):
    from test_web_browser import chromium, wait_js
    drv = chromium()
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    try:
        spec = mo_spec("mo", 8, "random")
        spec["trial"]["env"]["TRIAL_SLEEP"] = "0"
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 90,
                    "the study to finish")
    finally:
        stop(ctl, disp)
    front, _ = front_here(jz)
    p, url = serve(jz)
    try:
        drv.get(url + "/#/study/mo")
        wait_js(drv, "document.querySelector('#study-pareto')", what="the Pareto headline")
        head = drv.execute_script("return document.querySelector('#study-pareto').innerText")
        assert "Pareto set: %d trial" % len(front) in head
        marked = drv.execute_script(
            "return [...document.querySelectorAll('#trials-table td.pareto')]"
            ".map((td) => td.parentNode.dataset.trial)")
        assert {int(t) for t in marked} == front
    finally:
        drv.quit()
        stop(p)
