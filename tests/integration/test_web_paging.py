"""Paging of a study's trials in the web API (issue 43): GET
/api/studies/NAME/trials?limit=N&after=ID[&order=desc][&state=S] answers
one page in id order with `next` (the id to pass as `after`, null on the
last page), `total` (trials that match the filter) and `counts` (per
state, the whole study); /page embeds the first page and `trials_next`.
Pages of a study whose ids interleave with another study's give every
trial exactly once; a bad parameter is a 400 naming it. The trials are
asked for (`jizhi trial ask`), so no process runs."""
import os

from test_recovery import stop
from test_web_browser import chromium, wait_js
from webutil import http, serve


def ask_spec(name, trials):
    return {"name": name, "objective": {"metric": "loss", "mode": "min"},
            "scheduler": {"type": "random", "seed": 3}, "budget": {"trials": trials},
            "space": {"x": {"type": "float", "low": -1.0, "high": 1.0}}}


def pages(url, query):
    """Follows `next` from the first page; returns the pages' answers."""
    out, after = [], None
    while True:
        q = query + (f"&after={after}" if after is not None else "")
        st, j, _ = http("GET", f"{url}/api/studies/a/trials?{q}")
        assert st == 200, j
        out.append(j)
        after = j["next"]
        if after is None:
            return out
        assert len(out) < 20


def seven_trials(jz, budget=7):
    """Study a (budget: its trials budget): 7 asked trials (2 completed, 1 pruned, 1 failed, 3 running)
    whose ids interleave with study b's 3; returns a's ids."""
    jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
    jz.run("study", "submit", jz.write_spec(ask_spec("a", budget), "a.json"), check=0)
    jz.run("study", "submit", jz.write_spec(ask_spec("b", 3), "b.json"), check=0)
    ids = []
    for k in range(7):  # a's ids interleave with b's
        ids.append(int(jz.run("trial", "ask", "a", check=0).stdout.split()[0]))
        if k % 2 == 0 and k < 6:
            jz.run("trial", "ask", "b", check=0)
    for tid, how in zip(ids, ("0.5", "0.25", "pruned", "failed")):
        jz.run("trial", "tell", str(tid), how, check=0)
    return ids


def test_trials_pages_follow_next_and_bad_parameters_are_400(jz):
    ctl = jz.popen("controller", "--db", jz.db)
    web = None
    try:
        ids = seven_trials(jz)
        web, url = serve(jz)
        want_counts = dict(jz.sql("SELECT t.state, COUNT(*) FROM trials t JOIN studies s ON "
                                  "s.id=t.study_id WHERE s.name='a' GROUP BY t.state"))
        assert want_counts == {"completed": 2, "pruned": 1, "failed": 1, "running": 3}

        # the default page holds all 7, no next
        st, j, _ = http("GET", url + "/api/studies/a/trials")
        assert st == 200 and [t["id"] for t in j["trials"]] == ids and j["next"] is None
        assert j["total"] == 7
        assert {k: v for k, v in j["counts"].items() if v} == want_counts
        assert set(j["counts"]) >= {"pending", "running", "completed", "pruned", "stopped"}
        assert j["trials"][0]["value"] == 0.5 and "x" in j["trials"][0]["params"]

        # pages of 3: 3 + 3 + 1, every trial exactly once, in id order
        got = pages(url, "limit=3")
        assert [len(p["trials"]) for p in got] == [3, 3, 1]
        assert [t["id"] for p in got for t in p["trials"]] == ids
        assert [p["next"] for p in got] == [ids[2], ids[5], None]
        assert all(p["total"] == 7 for p in got)
        # a page that ends exactly at the last trial says so (no empty page)
        assert [len(p["trials"]) for p in pages(url, "limit=7")] == [7]
        # newest first
        got = pages(url, "limit=4&order=desc")
        assert [t["id"] for p in got for t in p["trials"]] == ids[::-1]
        # one state: total counts that state only
        got = pages(url, "limit=1&state=running")
        assert [t["id"] for p in got for t in p["trials"]] == ids[4:]
        assert all(p["total"] == 3 for p in got)
        st, j, _ = http("GET", url + "/api/studies/a/trials?state=stopped")
        assert st == 200 and j["trials"] == [] and j["next"] is None and j["total"] == 0
        # after the last id: empty
        st, j, _ = http("GET", url + f"/api/studies/a/trials?after={ids[-1]}")
        assert st == 200 and j["trials"] == [] and j["next"] is None

        # the page embeds the first page and where the rest starts
        st, j, _ = http("GET", url + "/api/studies/a/page?limit=5")
        assert st == 200 and [t["id"] for t in j["trials"]] == ids[:5]
        assert j["trials_next"] == ids[4]
        s = j["study"]
        assert (s["trials"], s["completed"], s["failed"], s["pruned"], s["running"]) == \
            (7, 2, 1, 1, 3)
        st, j, _ = http("GET", url + "/api/studies/a/page")
        assert st == 200 and len(j["trials"]) == 7 and j["trials_next"] is None

        for q, name in (("limit=0", "limit"), ("limit=10001", "limit"), ("limit=x", "limit"),
                        ("after=-1", "after"), ("after=1.5", "after"), ("order=up", "order"),
                        ("state=done", "state"), ("state=", "state")):
            for path in ("trials", "page"):
                st, j, _ = http("GET", f"{url}/api/studies/a/{path}?{q}")
                assert (st, j["error"]) == (400, "bad_argument"), (q, j)
                assert j["message"].startswith(name + ":"), (q, j)
        # /page takes only limit: the first page, that trials_next continues
        # in ascending ids (review item 19)
        for q, name in (("after=2", "after"), ("order=desc", "order"),
                        ("order=asc", "order"), ("state=running", "state")):
            st, j, _ = http("GET", f"{url}/api/studies/a/page?{q}")
            assert (st, j["error"]) == (400, "bad_argument"), (q, j)
            assert j["message"].startswith(name + ": /page reads the first page only"), j
        st, j, _ = http("GET", url + "/api/studies/nope/trials?limit=2")
        assert (st, j["error"]) == (404, "unknown_study")
    finally:
        stop(*([web] if web else []), ctl)


def test_the_page_shows_every_trial_of_several_pages(jz):
    """In Chromium, pages of 3 (localStorage jz.trialsPage): the study page
    draws the first page, follows `next` and ends with each of the 7 trials
    once, its head counting them all."""
    drv = chromium()
    ctl = jz.popen("controller", "--db", jz.db)
    web = None
    try:
        ids = seven_trials(jz)
        web, url = serve(jz)
        drv.get(url + "/#/")
        drv.execute_script("localStorage.setItem('jz.trialsPage', '3')")
        drv.get(url + "/#/study/a")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the study page")
        wait_js(drv, "document.body.dataset.trials === 'complete'", what="every page")
        wait_js(drv, "document.querySelector('#trial-count').innerText.startsWith('7 of 7')",
                what="7 trials in the table")
        assert sorted(drv.execute_script("return jz.study.trials.map((t) => t.id)")) == ids
        assert len(drv.execute_script("return document.querySelectorAll("
                                      "'#trials-table tbody tr')")) == 7
        head = drv.execute_script("return document.querySelector('#study-head').innerText")
        assert "2 running" not in head and "3 running" in head and "1 failed" in head
    finally:
        drv.quit()
        stop(*([web] if web else []), ctl)


# Wraps the page's fetch of the trials' pages (GET .../trials?after=):
# jzFail failed tries first (as a network error), then each answer is held
# (jzHeld set) until jzRelease() when jzHold is set.
WRAP_FETCH = """
const orig = window.fetch;
window.jzFail = arguments[0];
window.jzHeld = false;
window.jzHold = arguments[1] ? new Promise((ok) => (window.jzRelease = ok)) : null;
window.fetch = async (url, opt) => {
  if (!String(url).includes("/trials?after=")) return orig(url, opt);
  if (window.jzFail > 0) { window.jzFail--; throw new TypeError("test: network down"); }
  const r = await orig(url, opt);
  window.jzHeld = true;
  if (window.jzHold) await window.jzHold;
  return r;
};
"""


def test_the_page_retries_a_failed_page_and_fetches_a_trial_named_while_loading(jz):
    """In Chromium (review items 5, 6): a page request that fails twice is
    asked again, and the table ends complete (7 of 7), not marked complete
    with the first page only; a trial the stream names while the pages are
    being read (created after the last page was answered) is fetched when
    they end (8 of 8)."""
    drv = chromium()
    ctl = jz.popen("controller", "--db", jz.db)
    web = None
    try:
        ids = seven_trials(jz, budget=8)
        web, url = serve(jz)
        drv.get(url + "/#/")
        drv.execute_script("localStorage.setItem('jz.trialsPage', '3')")
        drv.execute_script(WRAP_FETCH, 2, False)
        drv.execute_script("location.hash = '#/study/a'")
        wait_js(drv, "document.body.dataset.trials === 'complete'", what="every page")
        wait_js(drv, "document.querySelector('#trial-count').innerText.startsWith('7 of 7')",
                what="7 trials after two failed tries")
        assert drv.execute_script("return window.jzFail") == 0
        assert not drv.execute_script("return document.querySelector('#trials-incomplete')")

        # pages of 5: /page holds 5, the second page (the last 2) is answered
        # and held; then an 8th trial is asked, named by the stream
        drv.execute_script("location.hash = '#/'")
        wait_js(drv, "!document.querySelector('#study-head')", what="the list")
        drv.execute_script("localStorage.setItem('jz.trialsPage', '5')")
        drv.execute_script(WRAP_FETCH, 0, True)
        drv.execute_script("location.hash = '#/study/a'")
        wait_js(drv, "window.jzHeld === true", what="the second page answered")
        new = int(jz.run("trial", "ask", "a", check=0).stdout.split()[0])
        wait_js(drv, "jz.live && jz.live.trials >= 1", what="the stream naming the new trial")
        assert sorted(drv.execute_script("return jz.study.trials.map((t) => t.id)")) == ids[:5]
        drv.execute_script("window.jzRelease()")
        wait_js(drv, "document.querySelector('#trial-count').innerText.startsWith('8 of 8')",
                what="the new trial in the table")
        assert sorted(drv.execute_script("return jz.study.trials.map((t) => t.id)")) == \
            ids + [new]
    finally:
        drv.quit()
        stop(*([web] if web else []), ctl)
