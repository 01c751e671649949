"""A guarded change and a live fork from the trial page, in headless
Chromium (see test_web_browser.py for when it skips): the guarded lr that
makes the formula trial's loss jump is reverted, and the page says so with
the evidence and marks it on the curves (a band for the watch window); a
fork into two siblings starts from the trial's checkpoint and `Decide
fork now` keeps the best. Screenshots web-trial-guard.png and
web-trial-fork.png go to build/test-artifacts/. Through the API alone
(no browser): a guarded set and a waited fork learn their outcome from the
store when the controller is killed and restarted during the wait."""
import json
import signal
import threading

from test_recovery import start_controller, start_dispatcher, stop
from test_safety import formula_spec, interventions, wait_steps
from test_web_browser import chromium, shot, wait_js
from webutil import daemons_with_web, http, make_token, serve


def ack_text(drv, word):
    return wait_js(drv, "(t => t.includes(%s) ? t : '')(document.getElementById('ack')"
                        ".innerText)" % json.dumps(word), 60, what="the answer: " + word)


def test_guard_and_fork_from_the_trial_page(jz):
    drv = chromium()
    ep, ctl, disp, url = daemons_with_web(jz, slots="3")
    tok = make_token(jz, "alice")
    try:
        spec = formula_spec("page", 1, 400, 0.05, FORMULA_SPIKE_STEP="0",
                            FORMULA_SPIKE_LR="1.0", FORMULA_SPIKE_KIND="spike")
        spec["budget"]["parallel"] = 3
        spec["owner"] = "alice"
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, tid, 6)
        drv.get(url + f"/#/trial/{tid}")
        wait_js(drv, "document.body.dataset.drawn === 'trial'", what="the trial page")
        drv.find_element("id", "token-input").send_keys(tok)
        drv.find_element("id", "token-save").click()
        wait_js(drv, "document.getElementById('whoami').innerText.includes('alice')",
                what="the token accepted")

        # a guarded lr=4 (outside the space: confirmed, as the CLI's --force)
        name = drv.find_element("id", "set-name")
        name.clear()
        name.send_keys("lr")
        drv.find_element("id", "set-value").send_keys("4.0")
        drv.find_element("id", "set-guard").click()
        steps = drv.find_element("id", "guard-steps")
        steps.clear()
        steps.send_keys("3")
        drv.find_element("id", "set-btn").click()
        alert = drv.switch_to.alert
        assert "lr=4 is not one of the space's values" in alert.text, alert.text
        alert.accept()
        ack = ack_text(drv, "reverted")
        assert "guarded set lr=4.0: reverted" in ack and "train_loss" in ack, ack
        assert "back to lr=0.1 from the checkpoint" in ack
        assert interventions(jz, tid)[0]["state"] == "reverted"
        wait_js(drv, "jz.trialMarks.some(m => m.label === 'guard: reverted')",
                what="the revert marked on the curves")
        assert drv.execute_script("return jz.trialBands.length") == 1
        band = drv.execute_script("return jz.trialBands[0]")
        assert band["to"] > band["from"] >= 6, band
        shot(drv, "web-trial-guard.png")

        # a fork into two siblings, then decided from the page
        drv.find_element("id", "fork-values").send_keys("lr=0.01 lr=0.1")
        fs = drv.find_element("id", "fork-steps")
        fs.clear()
        fs.send_keys("1000")
        drv.find_element("id", "fork-btn").click()
        alert = drv.switch_to.alert
        assert "lr=0.01 is not one of the space's values" in alert.text, alert.text
        alert.accept()
        # the trial checkpoints first (answered at once), then the siblings start
        ack = ack_text(drv, "checkpoints first")
        assert "fork into lr=0.01 lr=0.1" in ack, ack
        jz.wait_for(lambda: [i["state"] for i in interventions(jz, tid)
                             if i["kind"] == "fork"] == ["running"], 30, "the siblings")
        (iv,) = [i for i in interventions(jz, tid) if i["kind"] == "fork"]
        sibs = iv["data"]["siblings"]
        assert len(sibs) == 2
        for s in sibs:
            wait_steps(jz, s, iv["data"]["fork_step"] + 3)
        drv.find_element("id", "fork-decide").click()
        drv.switch_to.alert.accept()
        ack = ack_text(drv, "is the best")
        assert f"sibling {sibs[1]} is the best" in ack and "decided by a person" in ack, ack
        wait_js(drv, f"jz.trialMarks.some(m => m.label === 'fork decided: trial {sibs[1]}')",
                what="the decision marked on the curves")
        shot(drv, "web-trial-fork.png")
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=?", sibs[0])[0][0]
                    == "stopped", 30, "the other sibling stopped")
        assert jz.sql("SELECT who FROM events WHERE kind='fork_started'") == [("web:alice",)]
        errors = [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        jz.run("study", "stop", "page", check=0)
    finally:
        drv.quit()
        stop(ctl, disp)


def test_api_waits_learn_the_outcome_after_a_controller_kill9(jz):
    # the API's guarded set and a waited fork ("wait": true) wait for their
    # outcome; a kill -9 of the controller loses their request, the
    # restarted one decides from the database, and the web server (`jizhi
    # serve`, which outlives the controller) answers from it, as the CLI
    # does (before: 504 no_answer after the whole wait; a fork was only
    # ever answered at once)
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctls = [start_controller(jz, ep)]
    disp = start_dispatcher(jz, ep, 3)
    web, url = serve(jz)
    tok = make_token(jz, "alice")
    try:
        spec = formula_spec("api-kill", 1, 400, 0.05)
        spec["budget"]["parallel"] = 3
        spec["owner"] = "alice"
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state='running'")[0][0]
                    == 1, 60, "a running trial")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        wait_steps(jz, tid, 5)

        def post_in_thread(path, body):
            out = {}
            th = threading.Thread(target=lambda: out.update(r=http(
                "POST", url + path, body, token=tok, timeout=60)))
            th.start()
            return th, out

        def kill_and_restart():
            ctls[-1].send_signal(signal.SIGKILL)
            ctls[-1].wait(timeout=10)
            ctls.append(start_controller(jz, ep))

        th, out = post_in_thread(f"/api/trials/{tid}/set", {
            "values": {"lr": 0.12}, "force": True,
            "guard": {"mode": "checkpoint", "watch_steps": 30}})
        jz.wait_for(lambda: [i["state"] for i in interventions(jz, tid)] == ["watch"] and
                    interventions(jz, tid)[0]["data"]["seen"] >= 2, 30, "the watch window")
        kill_and_restart()
        assert interventions(jz, tid)[0]["done"] == 0
        th.join(45)
        assert "r" in out, "no answer within the wait"
        status, body, _ = out["r"]
        assert status == 200, body
        assert body["ack"]["guard"] == "kept" and body["ack"]["from_store"] is True, body
        assert body["ack"]["trial"] == tid and body["ack"]["values"] == {"lr": 0.12}, body

        # a waited fork: its decision, after a kill -9 before it
        bad = http("POST", url + f"/api/trials/{tid}/fork",
                   {"siblings": [{"lr": 0.01}], "wait": True, "wait_s": 0}, token=tok)
        assert bad[0] == 400 and "wait_s" in bad[1]["message"], bad
        th, out = post_in_thread(f"/api/trials/{tid}/fork", {
            "siblings": [{"lr": 0.01}, {"lr": 0.1}], "force": True, "steps": 60,
            "wait": True, "wait_s": 40})
        jz.wait_for(lambda: interventions(jz, tid)[-1]["kind"] == "fork" and
                    interventions(jz, tid)[-1]["state"] == "running", 30, "the siblings")
        sibs = interventions(jz, tid)[-1]["data"]["siblings"]
        jz.wait_for(lambda: all(jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=?", s)
                                [0][0] > 0 for s in sibs), 30, "the siblings' reports")
        kill_and_restart()
        assert interventions(jz, tid)[-1]["done"] == 0
        th.join(45)
        assert "r" in out, "no answer within the wait"
        status, body, _ = out["r"]
        assert status == 200, body
        ack = body["ack"]
        assert ack["fork"] == "decided" and ack["from_store"] is True, body
        assert ack["decision"]["best"] == sibs[1] and ack["siblings"] == sibs, body
    finally:
        web.kill()
        stop(disp, *reversed(ctls))
