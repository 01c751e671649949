"""The best trial at the command line, in the API and on the page, by one
definition (docs/design.md, "Best trial": completed trials only, finite
value, constraints met), and one trial number everywhere: the global id
that `jizhi trial ...` takes. A study runs after another one, so its
trials' ids differ from their numbers in the study. ASHA's stops are
"pruned", counted and labelled apart from a person's stops."""
import csv
import io
import json
import os
import sqlite3
import xml.etree.ElementTree as ET

from conftest import PROGS, base_spec
from test_early_stopping import spec_for
from test_multi_objective import front_here, mo_spec
from webutil import http, serve


def run_two_studies(jz):
    """A short first study (so ids and numbers differ), then ASHA on
    gns_trial.py: some trials pruned, the others completed."""
    first = base_spec("first", ["python3", os.path.join(PROGS, "params_trial.py")], trials=3,
                      parallel=1, env={"PARAMS_LOG": os.path.join(jz.dir, "p.log")})
    first["objective"] = {"metric": "score", "mode": "max"}
    jz.run("run", jz.write_spec(first, "first.json"), check=0)
    spec = spec_for("mix", {"type": "asha", "resource": "epoch", "grace": 1, "reduction": 3})
    return jz.run("run", jz.write_spec(spec, "mix.json"), check=0)


def expected_best(jz, study):
    """(id, number, value, params) of the best completed trial, from SQL."""
    (tid, number, value) = jz.sql(
        "SELECT t.id, t.number, t.value FROM trials t JOIN studies s ON s.id=t.study_id "
        "WHERE s.name=? AND t.state='completed' ORDER BY t.value DESC, t.id LIMIT 1",
        study)[0]
    rows = jz.sql("SELECT name, value FROM params WHERE trial_id=? AND generation="
                  "(SELECT MAX(generation) FROM params WHERE trial_id=?)", tid, tid)
    return tid, number, value, {k: json.loads(v) for k, v in rows}


def test_best_in_show_list_json_api_and_pruned_apart(jz):
    p = run_two_studies(jz)
    rows = jz.sql("SELECT t.id, t.number, t.state, t.value, t.reason FROM trials t "
                  "JOIN studies s ON s.id=t.study_id WHERE s.name='mix' ORDER BY t.id")
    pruned = [r for r in rows if r[2] == "pruned"]
    assert pruned and all(r[4].startswith("asha: rung") for r in pruned), rows
    assert all(r[2] in ("completed", "pruned") for r in rows), rows
    assert all(r[0] != r[1] for r in rows)  # ids are not numbers in the study
    tid, number, value, params = expected_best(jz, "mix")
    # jizhi run's summary counts them apart and names the same best
    assert f"{len(pruned)} pruned" in p.stdout, p.stdout
    assert f"best trial {tid}: val_acc=" in p.stdout, p.stdout

    # study list --json: best (global id, value, params) and the counts
    lst = {s["name"]: s for s in json.loads(jz.run("study", "list", "--json", check=0).stdout)}
    b = lst["mix"]["best"]
    assert (b["trial"], b["number"], b["params"]) == (tid, number, params)
    assert abs(b["value"] - value) < 1e-12
    assert lst["mix"]["pruned"] == len(pruned) and lst["mix"]["stopped"] == 0
    # the text table: BEST and PRUNED columns
    out = jz.run("study", "list", check=0).stdout
    head, *lines = out.splitlines()
    assert "PRUNED" in head and "BEST" in head, out
    (mix,) = [ln for ln in lines if ln.startswith("mix ")]
    assert f"(trial {tid})" in mix and f" {len(pruned)} " in mix, mix

    # study show: the best line (value, trial id, params), pruned in the table
    out = jz.run("study", "show", "mix", check=0).stdout
    (line,) = [ln for ln in out.splitlines() if ln.startswith("best: ")]
    assert line.startswith(f"best: trial {tid} val_acc="), line
    assert json.loads(line.split(" params ", 1)[1]) == params
    states = {int(ln.split()[0]): ln.split()[1] for ln in out.splitlines()
              if ln.split() and ln.split()[0].isdigit()}
    assert {t for t, s in states.items() if s == "pruned"} == {r[0] for r in pruned}
    d = json.loads(jz.run("study", "show", "mix", "--json", check=0).stdout)
    assert d["best"]["trial"] == tid and d["best"]["params"] == params
    assert "pareto" not in d

    # export: the state column says pruned
    csv_rows = list(csv.DictReader(io.StringIO(jz.run("study", "export", "mix",
                                                      check=0).stdout)))
    assert {int(r["id"]) for r in csv_rows if r["state"] == "pruned"} == {r[0] for r in pruned}
    # plot: pruned trials as their own marks, none labelled stopped
    svg = os.path.join(jz.dir, "mix.svg")
    jz.run("plot", "mix", "--output", svg, check=0)
    hist = [g for g in ET.parse(svg).getroot().iter("{http://www.w3.org/2000/svg}g")
            if g.get("id") == "history"][0]
    cls = [(el.get("class") or "", el.get("data-trial")) for el in hist.iter()]
    assert {int(t) for c, t in cls if c == "pruned-point"} == {r[0] for r in pruned}
    assert not [c for c, _ in cls if c == "stopped-point"]
    text = open(svg).read()
    assert f"pruned (early stopping), last value ({len(pruned)})" in text

    # the web API: the same best in the list and the study
    srv, url = serve(jz)
    try:
        st, j, _ = http("GET", url + "/api/studies")
        assert st == 200
        (m,) = [s for s in j["studies"] if s["name"] == "mix"]
        assert m["best"]["trial"] == tid and m["pruned"] == len(pruned)
        st, j, _ = http("GET", url + "/api/studies/mix")
        assert st == 200 and j["best"]["trial"] == tid and j["best"]["params"] == params
    finally:
        srv.terminate()
        srv.wait(timeout=10)


def test_a_stopped_trial_with_a_better_value_is_not_the_best(jz):
    """A trial a person stopped holds a better value than any completed
    one: the best is still the best completed trial, in list and show."""
    spec = base_spec("stopped", ["python3", os.path.join(PROGS, "params_trial.py")], trials=3,
                     parallel=1, env={"PARAMS_LOG": os.path.join(jz.dir, "p.log")})
    spec["objective"] = {"metric": "score", "mode": "max"}
    jz.run("run", jz.write_spec(spec), check=0)
    (tid, value) = jz.sql("SELECT id, value FROM trials ORDER BY value DESC LIMIT 1")[0]
    (other,) = jz.sql("SELECT id FROM trials WHERE id<>? ORDER BY id LIMIT 1", tid)[0]
    # as a stop by a person leaves it (a stop cannot be timed against a
    # trial this short): state stopped, its last value above the best
    con = sqlite3.connect(jz.db)
    con.execute("UPDATE trials SET state='stopped', value=?, reason='stopped by a person' "
                "WHERE id=?", (value + 1, other))
    con.commit()
    con.close()
    lst = {s["name"]: s for s in json.loads(jz.run("study", "list", "--json", check=0).stdout)}
    assert lst["stopped"]["best"]["trial"] == tid and lst["stopped"]["stopped"] == 1
    d = json.loads(jz.run("study", "show", "stopped", "--json", check=0).stdout)
    assert d["best"]["trial"] == tid


def test_several_objectives_list_and_show_the_pareto_set(jz):
    spec = mo_spec("mo", 8, sched="random")
    jz.run("run", jz.write_spec(spec), check=0)
    front, _ = front_here(jz)
    assert front
    lst = {s["name"]: s for s in json.loads(jz.run("study", "list", "--json", check=0).stdout)}
    assert lst["mo"]["best"] is None
    got = {p["trial"] for p in lst["mo"]["pareto"]}
    assert got == front
    for p in lst["mo"]["pareto"]:
        (a,) = jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='a'", p["trial"])[0]
        assert abs(p["values"]["a"] - a) < 1e-12 and set(p["values"]) == {"a", "b"}
    out = jz.run("study", "list", check=0).stdout
    assert f"Pareto set: {len(front)} trial" in out, out
    d = json.loads(jz.run("study", "show", "mo", "--json", check=0).stdout)
    assert d["best"] is None and {p["trial"] for p in d["pareto"]} == front
    out = jz.run("study", "show", "mo", check=0).stdout
    assert "best: " not in out and "Pareto set" in out, out


def test_page_shows_global_ids_the_best_and_pruned(jz):
    """The page in headless Chromium: the studies list, the headline, the
    trials and events tables name trials by the id commands take, the
    best is the best completed trial, and ASHA's stops read "pruned"."""
    from test_web_browser import chromium, shot, wait_js
    drv = chromium()
    run_two_studies(jz)
    tid, number, _, _ = expected_best(jz, "mix")
    pruned = {t for (t,) in jz.sql("SELECT id FROM trials WHERE state='pruned'")}
    srv, url = serve(jz)
    try:
        drv.get(url + "/#/")
        wait_js(drv, "document.querySelector('tr[data-study=\"mix\"]')", what="the study row")
        row = drv.execute_script("return document.querySelector('tr[data-study=\"mix\"]')"
                                 ".innerText")
        assert f"(trial {tid})" in row and f"#{number}" not in row, row
        shot(drv, "web-best-studies.png")
        drv.get(url + "/#/study/mix")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the study page")
        head = drv.execute_script("return document.getElementById('study-head').innerText")
        assert f"trial {tid}" in head and f"{len(pruned)} pruned" in head, head
        links = drv.execute_script(
            "return [...document.querySelectorAll('#trials-table tbody tr')].map(r => "
            "[Number(r.dataset.trial), r.querySelector('a').innerText, r.innerText])")
        assert links and all(str(t) == a.split()[0] for t, a, _ in links), links
        assert {t for t, _, text in links if "pruned" in text} == pruned
        ev = drv.execute_script(
            "return [...document.querySelectorAll('#events-table tbody tr a')].map(a => "
            "[a.getAttribute('href'), a.innerText])")
        assert ev and all(h == "#/trial/" + a for h, a in ev), ev
        assert drv.execute_script("return jz.study.study.best.trial") == tid
        shot(drv, "web-best-study.png")
        errors = [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        drv.quit()
        srv.terminate()
        srv.wait(timeout=10)
