"""The dashboard in a real headless Chromium (python3-selenium +
chromium-driver): it opens a running study, sees trials and curves update
live, changes a running trial's lr through the trial page, and the trial
reports the new lr. Screenshots of each page go to
build/test-artifacts/. Reports SKIPPED, with the reason, when Chromium
cannot start here; in CI (CI set, or JIZHI_REQUIRE_BROWSER=1, which .ci/run
sets) a browser that cannot start FAILS the test instead."""
import base64
import os
import shutil
import time

import pytest

from conftest import BUILD, PROGS, base_spec
from test_recovery import stop
from webutil import daemons_with_web, make_token

ARTIFACTS = os.path.join(BUILD, "test-artifacts")


def browser_required():
    """True in CI (CI set to anything but empty/0/false, or JIZHI_REQUIRE_BROWSER=1)."""
    if os.environ.get("JIZHI_REQUIRE_BROWSER", "") == "1":
        return True
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def no_browser(reason):
    """Skips with the reason here; fails with it in CI, where the browser
    tests must run."""
    if browser_required():
        pytest.fail(f"the browser tests must run in CI but {reason}", pytrace=False)
    pytest.skip(reason)


def chromium():
    """A headless Chromium driven by Selenium, or no_browser with why not."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        no_browser(f"python3-selenium is not installed ({e})")
    binary = shutil.which(os.environ.get("JIZHI_CHROMIUM", "chromium")) or \
        shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not binary or not os.path.exists(driver):
        no_browser("chromium / chromium-driver are not installed")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(driver), options=opts)
    except Exception as e:  # no display libraries, a crash at start...
        no_browser(f"Chromium cannot start here: {str(e).splitlines()[0]}")


def wait_js(drv, expr, timeout=30, what=None):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            last = drv.execute_script("return " + expr)
            if last:
                return last
        except Exception as e:  # the page may be between views
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what or expr} (last: {last!r})")


def shot(drv, name):
    """A screenshot of the whole page (beyond the window) in build/test-artifacts."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    m = drv.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = m.get("cssContentSize") or m["contentSize"]
    img = drv.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000),
                 "scale": 1}})
    with open(path, "wb") as f:
        f.write(base64.b64decode(img["data"]))
    return path


def test_dashboard_live_study_and_set_lr_through_the_page(jz):
    drv = chromium()
    ep, ctl, disp, url = daemons_with_web(jz, slots="3")
    tok = make_token(jz, "alice")
    try:
        # a short study that finishes, so the pages show ended trials too
        quick = base_spec("quick", ["python3", os.path.join(PROGS, "live_trial.py")], trials=6,
                          parallel=3, env={"STEPS": "25"})
        quick["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}}
        jz.run("study", "submit", jz.write_spec(quick), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies WHERE name='quick'")[0][0]
                    == "finished", 60, "the short study to finish")
        spec = base_spec("live", ["python3", os.path.join(PROGS, "live_trial.py")], trials=3,
                         parallel=3, env={"STEPS": "6000"})
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}}
        spec["owner"] = "alice"  # the token's user steers her own study
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(DISTINCT m.trial_id) FROM metrics m JOIN trials t "
                                   "ON t.id=m.trial_id JOIN studies s ON s.id=t.study_id "
                                   "WHERE s.name='live'")[0][0] >= 3, 60, "three reporting trials")

        # the studies list
        drv.get(url + "/#/")
        wait_js(drv, "document.querySelector('tr[data-study=\"live\"]')", what="the study row")
        row = drv.execute_script("return document.querySelector('tr[data-study=\"live\"]').innerText")
        assert "live" in row and "running" in row
        row = drv.execute_script("return document.querySelector('tr[data-study=\"quick\"]').innerText")
        assert "finished" in row and "6/6" in row
        studies_png = shot(drv, "web-studies.png")

        # a finished study: every trial in the history, the best highlighted
        drv.get(url + "/#/study/quick")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the finished study")
        assert drv.execute_script("return jz.charts.history.data.datasets[0].data.length") == 6
        (best,) = jz.sql("SELECT t.id FROM trials t JOIN studies s ON s.id=t.study_id WHERE "
                         "s.name='quick' ORDER BY value DESC LIMIT 1")[0]
        assert drv.execute_script("return document.querySelector('#trials-table tr.best')"
                                  ".dataset.trial") == str(best)
        # its importance panel draws the server's GP-based importance
        wait_js(drv, "jz.importance && jz.importance.trials === 6", what="the importance answer")
        assert drv.execute_script("return jz.charts.importance.data.labels") == ["lr"]
        assert drv.execute_script("return jz.charts.importance.data.datasets[0].label") == \
            "importance"
        finished_png = shot(drv, "web-study-finished.png")

        # the study page: trials and curves, then live growth
        drv.get(url + "/#/study/live")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the study page")
        wait_js(drv, "document.querySelectorAll('#trials-table tbody tr').length === 3",
                what="three trials in the table")
        pts0 = drv.execute_script("return jz.curveLines.reduce((n, l) => n + l.data.length, 0)")
        n_curves = drv.execute_script("return jz.curveLines.filter(l => l.data.length).length")
        assert n_curves == 3 and pts0 > 0
        wait_js(drv, "jz.live.points > 50", what="metrics pushed over the stream")
        wait_js(drv, f"jz.curveLines.reduce((n, l) => n + l.data.length, 0) > {pts0}",
                what="the curves to grow")
        steps_shown = drv.execute_script(
            "return Math.max(...jz.study.trials.map(t => t.last_step || 0))")
        # the table's steps follow the running trials (an event, not a clock)
        wait_js(drv, "Math.max(...jz.study.trials.map(t => t.last_step || 0)) > "
                f"{steps_shown}", what="the table's steps to grow")
        # sorting and filtering the table
        drv.execute_script("document.querySelector('#trials-table th[data-key=\"id\"]').click()")
        drv.execute_script("document.querySelector('#trials-table th[data-key=\"id\"]').click()")
        ids = drv.execute_script("return [...document.querySelectorAll('#trials-table tbody tr')]"
                                 ".map(r => Number(r.dataset.trial))")
        assert ids == sorted(ids, reverse=True)
        study_png = shot(drv, "web-study.png")
        # the x axis and the log scale switch
        from selenium.webdriver.support.ui import Select
        Select(drv.find_element("id", "curve-x")).select_by_value("time")
        wait_js(drv, "jz.charts.curves.options.scales.x.title.text.startsWith('seconds')",
                what="x = time")
        assert drv.execute_script("return jz.curveLines.every(l => l.data.every(p => p.x >= 0))")
        drv.find_element("id", "curve-log").click()
        wait_js(drv, "jz.charts.curves.options.scales.y.type === 'logarithmic'", what="log y")

        # the trial page: set lr through the form, with a token
        (tid,) = jz.sql("SELECT id FROM trials WHERE state='running' ORDER BY id LIMIT 1")[0]
        # (the "live" trials are the only ones running now)
        drv.get(url + f"/#/trial/{tid}")
        wait_js(drv, "document.body.dataset.drawn === 'trial'", what="the trial page")
        drv.find_element("id", "token-input").send_keys(tok)
        drv.find_element("id", "token-save").click()
        wait_js(drv, "document.getElementById('whoami').innerText.includes('alice')",
                what="the token accepted")
        name = drv.find_element("id", "set-name")
        name.clear()
        name.send_keys("lr")
        drv.find_element("id", "set-value").send_keys("0.5")
        # 0.5 lies outside the space [0.01, 0.1]: the page asks, as the CLI's --force
        n_events = jz.sql("SELECT COUNT(*) FROM events")[0][0]
        drv.find_element("id", "set-btn").click()
        alert = drv.switch_to.alert
        assert "lr=0.5 is outside the space (0.01 to 0.1, log scale)" in alert.text, alert.text
        alert.dismiss()
        wait_js(drv, "document.getElementById('ack').innerText.includes('not sent')",
                what="the page to say nothing was sent")
        assert jz.sql("SELECT COUNT(*) FROM events")[0][0] == n_events
        drv.find_element("id", "set-btn").click()
        alert = drv.switch_to.alert
        assert "lr=0.5" in alert.text and "anyway" in alert.text
        alert.accept()
        ack = wait_js(drv, "(t => t.includes('acknowledged') || t.includes(':') && "
                           "document.getElementById('ack').className === 'err' ? t : '')"
                           "(document.getElementById('ack').innerText)",
                      what="the acknowledgement")
        assert "acknowledged by the trial in" in ack and "ms" in ack, ack
        # the trial reports the new lr, in the store and on the page
        (ack_step,) = jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND name='lr'",
                             tid)[0]
        jz.wait_for(lambda: jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?", tid)[0][0]
                    > ack_step + 3, 30, "more steps")
        later = jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='lr' AND step>?",
                       tid, ack_step + 1)
        assert later and all(v == 0.5 for (v,) in later)
        wait_js(drv, "(d => d[d.length - 1].y === 0.5)(jz.charts['m:lr'].data.datasets[0].data)",
                what="the page's lr curve at 0.5")
        assert jz.sql("SELECT who FROM events WHERE kind='instruction'") == [("web:alice",)]
        wait_js(drv, "document.querySelector('#trial-events').innerText.includes('web:alice')",
                what="the intervention in the trial's events")
        wait_js(drv, "jz.trialMarks.some(m => m.label === 'lr=0.5')",
                what="the change marked on the trial's curves")
        trial_png = shot(drv, "web-trial.png")

        # back on the study page the intervention is in the event log
        drv.get(url + "/#/study/live")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the study page again")
        wait_js(drv, "document.querySelector('#events-table').innerText.includes('web:alice')",
                what="the event log entry")
        for p in (studies_png, finished_png, study_png, trial_png):
            assert os.path.getsize(p) > 10000, p
        # and no script error on any page
        errors = [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        # pause and release a program that cannot checkpoint: the page waits and
        # shows the refusal with the program's reason; the trial keeps running
        drv.get(url + f"/#/trial/{tid}")
        wait_js(drv, "document.body.dataset.drawn === 'trial'", what="the trial page again")
        drv.find_element("id", "release-btn").click()
        drv.switch_to.alert.accept()
        ack = wait_js(drv, "document.getElementById('ack').className === 'err' && "
                           "document.getElementById('ack').innerText", what="the release outcome")
        assert "was not released: it refused to checkpoint (the program wrote no checkpoint)" \
            in ack and "keeps running" in ack, ack
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid) == [("running",)]
        shot(drv, "web-trial-release-refused.png")
        jz.run("study", "stop", "live", check=0)
    finally:
        drv.quit()
        stop(ctl, disp)


def test_page_marks_only_applied_changes_and_a_release_and_its_resume(jz):
    """The page marks what `jizhi plot` marks (review37 item 6): a change
    the trial refused is not marked, a pause --release is a "release" (not
    a checkpoint and a person's stop) and its resume a "resume"; the trial
    page follows them live as they settle, the study page from its events."""
    from test_plot import RELEASABLE
    drv = chromium()
    prog = os.path.join(jz.dir, "releasable.py")
    with open(prog, "w") as f:  # long enough to be steered while the page is open
        f.write(RELEASABLE.replace("while step < 60", "while step < 600"))
    ep, ctl, disp, url = daemons_with_web(jz, slots="1")
    try:
        spec = base_spec("rel", ["python3", prog], trials=1, parallel=1)
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] >= 3, 60,
                    "the trial to report")
        ((tid,),) = jz.sql("SELECT id FROM trials")
        drv.get(url + f"/#/trial/{tid}")
        wait_js(drv, "document.body.dataset.drawn === 'trial'", what="the trial page")
        p = jz.run("trial", "set", str(tid), "lr=-1", "--force")
        assert p.returncode == 1 and "lr must be positive" in p.stderr, p.stderr
        jz.run("trial", "set", str(tid), "lr=0.5", "--force", check=0)
        p = jz.run("trial", "pause", str(tid), "--release")
        assert f"trial {tid}: released" in p.stdout, (p.stdout, p.stderr)
        jz.run("trial", "resume", str(tid), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM events WHERE kind='retry'")[0][0], 30,
                    "the resume")
        labels = "jz.trialMarks.map(m => m.label).join(',')"
        try:
            wait_js(drv, f"{labels} === 'lr=0.5,release,resume'", timeout=15)
        except AssertionError:
            raise AssertionError("the trial page marks " + drv.execute_script("return " + labels))
        drv.get(url + "/#/study/rel")
        wait_js(drv, "document.body.dataset.drawn === 'study'", what="the study page")
        tips = drv.execute_script("return jz.charts.curves.data.datasets[0].data"
                                  ".map(p => p.label.split(' — ')[0])")
        assert tips == [f"trial {tid}: set lr=0.5 by cli", f"trial {tid}: release by cli",
                        f"trial {tid}: resume by cli"], tips
        errors = [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        drv.quit()
        stop(ctl, disp)
