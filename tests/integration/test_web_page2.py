"""The study page's second round (issue 39, item 10): a Pareto-front
scatter and a column per objective for a study with two objectives, the
trials' download (GET .../export: the bytes of `jizhi study export`), a
trial's log on its page (GET /api/trials/ID/log), learning curves of
trials with one evaluation drawn as markers and left out of the robust y
range, parallel coordinates with no axis for a const parameter and an
"inactive" place for a conditional one, and an events table that wraps.
The pages are checked in headless Chromium; screenshots go to
$JIZHI_BUILD/test-artifacts/web-page2-*.png."""
import json
import os
import sqlite3

import pytest

from conftest import PROGS, base_spec
from webutil import http, serve

ONE_BELOW = 0.35  # page_trial.py reports once (a = 50) below this x


def page_spec():
    spec = base_spec("page", ["python3", os.path.join(PROGS, "page_trial.py")], trials=12,
                     parallel=2, env={"ONE_BELOW": str(ONE_BELOW)})
    spec["objective"] = [{"metric": "a", "mode": "min"}, {"metric": "b", "mode": "min"}]
    spec["scheduler"] = {"type": "random", "seed": 5}
    spec["space"] = {
        "x": {"type": "float", "low": 0.0, "high": 1.0},
        "opt": {"type": "choice", "values": ["sgd", "adam"]},
        "momentum_of_the_sgd_optimizer": {"type": "float", "low": 0.5, "high": 0.99,
                                          "when": {"opt": ["sgd"]}},
        "c": {"type": "const", "value": 3},
    }
    return spec


@pytest.fixture
def page_study(jz):
    p = jz.run("run", jz.write_spec(page_spec()), "--slots", "2", check=0)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = jz.sql("SELECT t.id, t.state, (SELECT COUNT(*) FROM metrics m WHERE m.trial_id=t.id "
                  "AND m.name='a') FROM trials t ORDER BY t.id")
    assert len(rows) == 12 and all(r[1] == "completed" for r in rows), rows
    single = [r[0] for r in rows if r[2] == 1]
    assert single and len(single) <= 8, rows  # the seed gives both kinds
    srv, url = serve(jz)
    yield url, rows, single
    srv.terminate()
    srv.wait(timeout=10)


def test_export_and_log_endpoints(jz, page_study):
    url, rows, _ = page_study
    # the download is the bytes of `jizhi study export`, CSV and JSON
    st, body, hdr = http("GET", url + "/api/studies/page/export?format=csv", raw=True)
    assert st == 200, body
    assert hdr["Content-Type"].startswith("text/csv")
    assert hdr["Content-Disposition"] == 'attachment; filename="page.csv"'
    assert body.decode() == jz.run("study", "export", "page", check=0).stdout
    assert "pareto" in body.decode().splitlines()[0]
    st, body, hdr = http("GET", url + "/api/studies/page/export?format=json", raw=True)
    assert st == 200 and hdr["Content-Type"] == "application/json"
    assert body.decode() == jz.run("study", "export", "page", "--format", "json",
                                   check=0).stdout
    st, body, _ = http("GET", url + "/api/studies/page/export", raw=True)  # csv by default
    assert st == 200 and body.decode().startswith("number,id,state")
    st, err, _ = http("GET", url + "/api/studies/page/export?format=xml")
    assert st == 400 and err["error"] == "bad_argument" and "csv or json" in err["message"]
    st, err, _ = http("GET", url + "/api/studies/nope/export")
    assert st == 404 and err["error"] == "unknown_study"

    # a trial's log: stdout, stderr, a tail
    tid = rows[0][0]
    st, log, _ = http("GET", url + f"/api/trials/{tid}/log")
    assert st == 200, log
    assert log["stream"] == "out" and log["source"] == "file" and log["trial"] == tid
    assert log["data"].startswith("page-trial says hello x=") and log["from"] == 0
    assert log["size"] == len(log["data"].encode())
    st, err_log, _ = http("GET", url + f"/api/trials/{tid}/log?stream=err")
    assert st == 200 and "page-trial note on stderr" in err_log["data"]
    st, tail, _ = http("GET", url + f"/api/trials/{tid}/log?tail=10")
    assert st == 200 and tail["data"] == log["data"][-10:] and tail["from"] == log["size"] - 10
    for q, code in (("stream=in", 400), ("tail=0", 400), ("tail=x", 400),
                    (f"tail={10**7}", 400)):
        st, err, _ = http("GET", url + f"/api/trials/{tid}/log?{q}")
        assert st == code, (q, st, err)
    st, err, _ = http("GET", url + "/api/trials/99999/log")
    assert st == 404 and err["error"] == "unknown_trial"
    # a path in the store is never a way to read another file
    con = sqlite3.connect(jz.db)
    con.execute("UPDATE trials SET out_path='/etc/passwd' WHERE id=?", (tid,))
    con.commit()
    con.close()
    st, err, _ = http("GET", url + f"/api/trials/{tid}/log")
    assert st == 404 and err["error"] == "no_log", err

    # /pareto lists every completed trial with both objectives, marking the front
    st, j, _ = http("GET", url + "/api/studies/page/pareto")
    assert st == 200
    assert sorted(t["id"] for t in j["trials"]) == [r[0] for r in rows]
    assert {t["id"] for t in j["trials"] if t["pareto"]} == {p["id"] for p in j["pareto"]}
    assert all(set(t["values"]) == {"a", "b"} for t in j["trials"])


def test_page_pareto_scatter_logs_curves_parallel_events(jz, page_study):
    from test_web_browser import chromium, shot, wait_js
    url, rows, single = page_study
    drv = chromium()
    try:
        drv.get(url + "/#/study/page")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the study page")
        # the Pareto front: one point per completed trial, the front in red
        wait_js(drv, "!!(jz.pareto && jz.charts.pareto)", what="the Pareto scatter")
        assert drv.execute_script("return jz.pareto.points") == len(rows)
        n = drv.execute_script("return jz.charts.pareto.data.datasets.reduce((n, d) => "
                               "n + d.data.length, 0)")
        assert n == len(rows)
        front = drv.execute_script("return jz.charts.pareto.data.datasets[0].data.map(p => p.id)")
        st, j, _ = http("GET", url + "/api/studies/page/pareto")
        assert sorted(front) == sorted(p["id"] for p in j["pareto"]) and front
        # every objective is a column of the trials table
        heads = drv.execute_script("return [...document.querySelectorAll('#trials-table th')]"
                                   ".map(h => h.innerText.trim())")
        assert "a" in heads and "b" in heads, heads
        b_of = {t["id"]: t["values"]["b"] for t in j["trials"]}
        cells = drv.execute_script(
            "const i = [...document.querySelectorAll('#trials-table th')].findIndex(h => "
            "h.dataset.key === 'o:b'); return [...document.querySelectorAll("
            "'#trials-table tbody tr')].map(r => [Number(r.dataset.trial), "
            "r.children[i].innerText])")
        assert all(c != "–" for _, c in cells) and len(cells) == len(rows), cells
        # downloads on the page
        hrefs = drv.execute_script("return [document.getElementById('export-csv').href, "
                                   "document.getElementById('export-json').href]")
        assert hrefs[0].endswith("/api/studies/page/export?format=csv")
        assert hrefs[1].endswith("/api/studies/page/export?format=json")
        del b_of

        # learning curves: a trial with one evaluation is a marker, not a
        # triangle, and the robust y range leaves its a = 50 out
        assert drv.execute_script("return jz.curvesSingle") == len(single)
        assert drv.execute_script("return jz.charts.curves.data.datasets[0].data.length") == 0
        ymax = drv.execute_script("return jz.charts.curves.scales.y.max")
        assert ymax < 5, ymax
        assert "with one evaluation" in drv.execute_script(
            "return document.getElementById('curves-note').innerText")
        # without the robust range, they are in it
        drv.find_element("id", "curve-robust").click()
        wait_js(drv, "jz.charts.curves.scales.y.max >= 50", what="the full y range")
        drv.find_element("id", "curve-robust").click()

        # parallel coordinates: no axis for the const, an inactive place for
        # the conditional parameter (the trials with opt = adam)
        axes = drv.execute_script("return jz.parallel.axes")
        assert sorted(axes[:-1]) == ["momentum_of_the_sgd_optimizer", "opt", "x"], axes
        assert axes[-1] == "a" and "c" not in axes
        adam = sum(1 for (p,) in jz.sql("SELECT value FROM params WHERE name='opt'")
                   if json.loads(p) == "adam")
        assert adam and drv.execute_script("return jz.parallel.inactive") == adam

        # the events table wraps long details
        ws = drv.execute_script("const td = document.querySelector('#events-table td.wrap');"
                                " return td && getComputedStyle(td).whiteSpace")
        assert ws == "normal", ws
        drv.execute_script("window.scrollTo(0, 0)")
        shot(drv, "web-page2-study.png")
        drv.find_element("id", "parallel").screenshot(
            os.path.join(os.path.dirname(shot(drv, "web-page2-study.png")),
                         "web-page2-parallel.png"))

        # a trial's page shows its log, stdout then stderr
        tid = rows[0][0]
        drv.get(url + f"/#/trial/{tid}")
        wait_js(drv, "document.body.dataset.drawn === 'trial'", what="the trial page")
        wait_js(drv, "document.getElementById('trial-log').innerText.includes("
                     "'page-trial says hello')", what="the trial's stdout on its page")
        from selenium.webdriver.support.ui import Select
        Select(drv.find_element("id", "log-stream")).select_by_value("err")
        wait_js(drv, "document.getElementById('trial-log').innerText.includes("
                     "'page-trial note on stderr')", what="the trial's stderr")
        drv.execute_script("window.scrollTo(0, 0)")
        shot(drv, "web-page2-trial.png")
        errors = [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        drv.quit()
