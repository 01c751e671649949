"""The web API (`jizhi serve`, `--http` on the daemons): every GET endpoint
over a real study, every POST through the real controller with a bearer
token, the live stream, the tokens, and bad requests (4xx with a JSON
error, nothing changed)."""
import json
import os
import socket
import threading
import time
import urllib.request

from conftest import PROGS, base_spec
from test_recovery import stop
from webutil import daemons_with_web, http, make_token, serve, wait_url, web_popen


def live_spec(name, trials=2, parallel=2, steps="4000"):
    spec = base_spec(name, ["python3", os.path.join(PROGS, "live_trial.py")], trials=trials,
                     parallel=parallel, env={"STEPS": steps})
    spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}}
    return spec


def running(jz, n=1):
    jz.wait_for(lambda: jz.sql("SELECT COUNT(DISTINCT trial_id) FROM metrics")[0][0] >= n, 60,
                "reporting trials")
    return [r[0] for r in jz.sql("SELECT id FROM trials WHERE state='running' ORDER BY id")]


def db_state(jz):
    """Everything a request could change."""
    return (jz.sql("SELECT COUNT(*), MAX(id) FROM events"),
            jz.sql("SELECT id, state, generation, attempt FROM trials ORDER BY id"),
            jz.sql("SELECT name, state FROM studies ORDER BY id"),
            jz.sql("SELECT COUNT(*) FROM params"),
            jz.sql("SELECT id, revoked FROM tokens ORDER BY id"))


def test_tokens_store_only_a_hash_and_revoke(jz):
    tok = make_token(jz, "alice")
    assert tok.startswith("jzt_") and len(tok) == 68
    rows = jz.sql("SELECT user, role, hash, revoked FROM tokens")
    assert rows == [("alice", "user", rows[0][2], None)]
    assert rows[0][2] != tok and len(rows[0][2]) == 64
    with open(jz.db, "rb") as f:
        assert tok.encode() not in f.read()
    make_token(jz, "vera", "viewer")
    listed = json.loads(jz.run("token", "list", "--json", "--db", jz.db, check=0).stdout)
    assert [(t["user"], t["role"], t["revoked"]) for t in listed] == [
        ("alice", "user", None), ("vera", "viewer", None)]
    # bad input: exit 2, nothing stored
    for args in (["create", "a b"], ["create", "bob", "--role", "dispatcher"],
                 ["create", "bob", "--role", "root"], ["list", "--role", "admin"], ["nope"]):
        p = jz.run("token", *args, "--db", jz.db)
        assert p.returncode == 2 and "jizhi: token" in p.stderr, args
    assert jz.sql("SELECT COUNT(*) FROM tokens")[0][0] == 2
    p = jz.run("token", "revoke", "99", "--db", jz.db)
    assert p.returncode == 1 and "no valid token" in p.stderr
    assert "revoked 1 token" in jz.run("token", "revoke", "vera", "--db", jz.db, check=0).stdout
    assert jz.sql("SELECT revoked IS NOT NULL FROM tokens WHERE user='vera'") == [(1,)]


def test_read_endpoints_over_a_running_study(jz):
    ep, ctl, disp, url = daemons_with_web(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("live")), check=0)
        ids = running(jz, 2)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics WHERE name='score'")[0][0] >= 60,
                    60, "some points")
        st, j, h = http("GET", url + "/api/studies")
        assert st == 200 and h["Content-Type"] == "application/json"
        (s,) = j["studies"]
        assert s["name"] == "live" and s["state"] == "running" and s["total"] == 2
        assert s["objective"] == {"metric": "score", "mode": "max"} and s["running"] == 2

        st, j, _ = http("GET", url + "/api/studies/live")
        assert st == 200 and j["spec"]["name"] == "live" and j["progress"] == 0

        st, j, _ = http("GET", url + "/api/studies/live/trials")
        assert st == 200 and sorted(t["id"] for t in j["trials"]) == sorted(ids)
        t0 = j["trials"][0]
        assert "token" not in t0 and "lr" in t0["params"] and t0["generation"] == 0

        st, j, _ = http("GET", url + "/api/studies/live/events")
        assert st == 200 and any(e["kind"] == "study_submitted" for e in j["events"])
        last = j["events"][-1]["id"]
        st, j2, _ = http("GET", url + f"/api/studies/live/events?after={last}")
        assert st == 200 and all(e["id"] > last for e in j2["events"])

        # curves: at most `points` per trial, steps increasing, values inside
        # the stored range of that trial
        st, j, _ = http("GET", url + "/api/studies/live/curves?metric=score&points=8&band=1")
        assert st == 200 and j["metric"] == "score" and set(j["trials"]) == {str(i) for i in ids}
        for tid, c in j["trials"].items():
            lo, hi = jz.sql("SELECT MIN(value), MAX(value) FROM metrics WHERE trial_id=? AND "
                            "name='score'", int(tid))[0]
            assert 1 <= len(c["s"]) <= 8 and len(c["y"]) == len(c["s"]) == len(c["t"])
            assert c["s"] == sorted(c["s"])
            tol = 1e-6 * max(abs(lo), abs(hi))  # numbers are sent with 7 digits
            assert all(lo - tol <= y <= hi + tol for y in c["y"])
            assert all(l - tol <= y <= u + tol for l, y, u in zip(c["lo"], c["y"], c["hi"]))

        st, j, _ = http("GET", url + "/api/studies/live/page?points=auto")
        assert st == 200 and j["study"]["name"] == "live" and len(j["trials"]) == 2
        assert j["curves"]["metric"] == "score" and set(j["metrics"]) >= {"lr", "score"}
        assert j["marks"]["metric"] > 0 and j["curves_points"] >= 20

        tid = ids[0]
        st, j, _ = http("GET", url + f"/api/trials/{tid}")
        assert st == 200 and j["id"] == tid and j["study"] == "live" and "token" not in j
        assert j["lineage"][0]["generation"] == 0 and set(j["metric_names"]) == {"lr", "score"}
        st, j, _ = http("GET", url + f"/api/trials/{tid}/metrics?name=lr&points=5")
        (n,) = jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=? AND name='lr'", tid)[0]
        assert st == 200 and list(j["metrics"]) == ["lr"] and 1 <= len(j["metrics"]["lr"]["s"]) <= 5
        assert n > 5
        st, j, _ = http("GET", url + f"/api/trials/{tid}/metrics")
        assert st == 200 and set(j["metrics"]) == {"lr", "score"}

        # the page and its files come from the binary
        st, body, h = http("GET", url + "/", raw=True)
        assert st == 200 and b"/chart.min.js" in body and h["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in h["Content-Security-Policy"]
        for path in ("/app.js", "/style.css", "/chart.min.js"):
            st, body, _ = http("GET", url + path, raw=True)
            assert st == 200 and len(body) > 1000, path
        st, j, _ = http("GET", url + "/api/whoami", token=make_token(jz, "vera", "viewer"))
        assert st == 200 and j == {"user": "vera", "role": "viewer"}
    finally:
        stop(ctl, disp)


def test_write_endpoints_go_through_the_controller(jz):
    ep, ctl, disp, url = daemons_with_web(jz)
    web, url2 = serve(jz)  # a separate `jizhi serve` finds the controller by <db>.endpoint
    tok = make_token(jz, "alice")
    try:
        st, j, _ = http("POST", url2 + "/api/studies", live_spec("w1"), token=tok)
        assert st == 200 and j["ok"] and j["who"] == "web:alice" and j["round_trip_ms"] >= 0
        assert jz.sql("SELECT name, state FROM studies") == [("w1", "running")]
        tid = running(jz, 2)[0]

        # 0.5 lies outside the space [0.01, 0.1]: sent only with "force"
        st, j, _ = http("POST", url + f"/api/trials/{tid}/set", {"values": {"lr": 0.5},
                                                                  "force": True}, token=tok)
        assert st == 200 and j["ack"]["latency_s"] >= 0, j
        (ack_step,) = jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND name='lr'", tid)[0]
        jz.wait_for(lambda: jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=?", tid)[0][0]
                    > ack_step + 2, 30, "more steps")
        later = jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='lr' AND step>?",
                       tid, ack_step + 1)
        assert later and all(v == 0.5 for (v,) in later)
        ev = jz.sql("SELECT who, kind, applied, actor FROM events WHERE kind='instruction'")
        assert ev == [("web:alice", "instruction", 1, "alice")]
        # the token's user is who the controller checks: bob does not own w1
        bob = make_token(jz, "bob")
        before = db_state(jz)
        for path in (f"/api/trials/{tid}/set", "/api/studies/w1/stop"):
            st, j, _ = http("POST", url2 + path, {"values": {"lr": 0.1}}, token=bob)
            assert st == 403 and j["error"] == "forbidden", j
            assert "bob may not steer study w1: it belongs to alice" in j["message"]
        assert db_state(jz) == before

        st, j, _ = http("POST", url2 + f"/api/trials/{tid}/pause", {}, token=tok)
        assert st == 200 and j["ack"]["latency_s"] >= 0
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "paused",
                    30, "paused")
        st, j, _ = http("POST", url2 + f"/api/trials/{tid}/resume", token=tok)
        assert st == 200
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "running",
                    30, "running again")
        st, j, _ = http("POST", url2 + f"/api/trials/{tid}/stop", token=tok)
        assert st == 200
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "stopped",
                    30, "stopped")
        # a set on an ended trial: 409 from the controller's refusal, nothing recorded
        before = db_state(jz)
        st, j, _ = http("POST", url2 + f"/api/trials/{tid}/set", {"values": {"lr": 0.2}}, token=tok)
        assert st == 409 and j["error"] == "bad_state" and "not running" in j["message"]
        assert db_state(jz) == before

        st, j, _ = http("POST", url2 + "/api/studies/w1/stop", token=tok)
        assert st == 200
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "stopped", 30, "stop")
        st, j, _ = http("POST", url2 + "/api/studies/w1/resume", token=tok)
        assert st == 200
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "running", 30, "resume")
        who = jz.sql("SELECT kind, who FROM events WHERE kind LIKE 'study_%' ORDER BY id")
        assert who == [("study_submitted", "cli"), ("study_stopped", "web:alice"),
                       ("study_resumed", "web:alice")]
        http("POST", url2 + "/api/studies/w1/stop", token=tok)
    finally:
        stop(web, ctl, disp)


def test_pause_release_and_resume_through_the_api(jz):
    ep, ctl, disp, url = daemons_with_web(jz, slots="1")
    tok = make_token(jz, "root", "admin")
    try:
        spec = base_spec("rel", ["jizhi-train", "--dataset", "synthetic", "--synthetic-n",
                                 "4000", "--epochs", "60", "--threads", "1", "--quiet",
                                 "--log-every", "5"], trials=1, parallel=1)
        spec["objective"] = {"metric": "val_acc", "mode": "max"}
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.05, "log": True}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: (jz.sql("SELECT MAX(step) FROM metrics")[0][0] or 0) >= 50, 60,
                    "training progress")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        # the answer waits for the outcome: checkpointed, exited, suspended
        st, j, _ = http("POST", url + f"/api/trials/{tid}/pause", {"release": True}, token=tok)
        assert st == 200 and j["ack"]["released"] is True, j
        assert jz.sql("SELECT state FROM trials")[0][0] == "suspended"
        st, j, _ = http("POST", url + f"/api/trials/{tid}/resume", token=tok)
        assert st == 200 and j["ack"]["restarting"] is True
        jz.wait_for(lambda: jz.sql("SELECT attempt, state FROM trials")[0] == (1, "running"), 60,
                    "the restart")
        http("POST", url + f"/api/trials/{tid}/stop", token=tok)
    finally:
        stop(ctl, disp)


def test_bad_requests_get_4xx_json_and_change_nothing(jz):
    ep, ctl, disp, url = daemons_with_web(jz)
    tok = make_token(jz, "alice")
    viewer = make_token(jz, "vera", "viewer")
    revoked = make_token(jz, "old")
    jz.run("token", "revoke", "old", "--db", jz.db, check=0)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("b1")), check=0)
        tid = running(jz, 2)[0]
        set_url = url + f"/api/trials/{tid}/set"
        good = {"values": {"lr": 0.3}}
        cases = [
            # (method, url, body, kwargs, status, error)
            ("POST", set_url, good, {}, 401, "unauthenticated"),
            ("POST", set_url, good, {"token": "jzt_" + "0" * 64}, 401, "bad_token"),
            ("POST", set_url, good, {"token": "not-a-token"}, 401, "bad_token"),
            ("POST", set_url, good, {"token": revoked}, 401, "bad_token"),
            ("POST", set_url, good, {"token": viewer}, 403, "forbidden"),
            ("POST", set_url, good, {"token": tok, "ctype": "text/plain"}, 415, "content_type"),
            ("POST", set_url, good, {"token": tok, "ctype": "application/x-www-form-urlencoded"},
             415, "content_type"),
            ("POST", set_url, good, {"token": tok, "headers": {"Origin": "http://evil.example"}},
             403, "cross_origin"),
            ("POST", set_url, b"{not json", {"token": tok}, 400, "malformed"),
            ("POST", set_url, b"[1,2]", {"token": tok}, 400, "malformed"),
            ("POST", set_url, {"values": {}}, {"token": tok}, 400, "malformed"),
            ("POST", set_url, {"values": {"lr": [1]}}, {"token": tok}, 400, "malformed"),
            ("POST", set_url, {"values": {"bad name": 1}}, {"token": tok}, 400, "malformed"),
            ("POST", set_url, b"x" * (1024 * 1024 + 10), {"token": tok}, 413, "too_large"),
            ("POST", url + "/api/trials/abc/set", good, {"token": tok}, 400, "bad_argument"),
            ("POST", url + "/api/trials/999999/set", good, {"token": tok}, 404, "unknown_trial"),
            ("POST", url + "/api/trials/999999/stop", None, {"token": tok}, 404, "unknown_trial"),
            ("POST", url + f"/api/trials/{tid}/pause", {"release": "yes"}, {"token": tok}, 400,
             "malformed"),
            ("POST", url + "/api/studies/nope/stop", None, {"token": tok}, 404, "unknown_study"),
            ("POST", url + "/api/studies", {"name": "x"}, {"token": tok}, 400, "bad_spec"),
            ("POST", url + "/api/studies", {"name": "b1"}, {"token": viewer}, 403, "forbidden"),
            ("GET", url + "/api/studies/nope", None, {}, 404, "unknown_study"),
            ("GET", url + "/api/studies/nope/curves", None, {}, 404, "unknown_study"),
            ("GET", url + "/api/studies/b1/curves?points=1", None, {}, 400, "bad_argument"),
            ("GET", url + "/api/studies/b1/curves?points=x", None, {}, 400, "bad_argument"),
            ("GET", url + "/api/studies/b1/events?after=-3", None, {}, 400, "bad_argument"),
            ("GET", url + "/api/trials/0", None, {}, 400, "bad_argument"),
            ("GET", url + "/api/trials/424242", None, {}, 404, "unknown_trial"),
            ("GET", url + "/api/trials/424242/metrics", None, {}, 404, "unknown_trial"),
            ("GET", url + "/api/whoami", None, {}, 401, "unauthenticated"),
            ("GET", url + "/api/whoami", None, {"token": revoked}, 401, "bad_token"),
            ("GET", url + "/api/nothing", None, {}, 404, "not_found"),
            ("GET", url + "/nothing.js", None, {}, 404, "not_found"),
            ("GET", url + "/%2e%2e/%2e%2e/etc/passwd", None, {}, 404, "not_found"),
            ("GET", set_url, None, {}, 405, "method"),
            ("DELETE", url + "/api/studies/b1", None, {}, 405, "method"),
            ("PUT", url + "/api/studies", None, {"token": tok}, 405, "method"),
            ("POST", url + "/", None, {"token": tok}, 405, "method"),
        ]
        before = db_state(jz)
        for method, u, body, kw, status, err in cases:
            st, j, _ = http(method, u, body, **kw)
            assert (st, isinstance(j, dict) and j.get("error")) == (status, err), (method, u, kw, j)
            assert isinstance(j["message"], str) and j["message"]
        # a raw request with a path that climbs out of the root
        port = int(url.rsplit(":", 1)[1])

        def raw(path, host):
            with socket.create_connection(("127.0.0.1", port), 10) as sock:
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                             "Connection: close\r\n\r\n".encode())
                out = b""
                while chunk := sock.recv(65536):
                    out += chunk
            return out
        reply = raw("/../../../../etc/passwd", f"127.0.0.1:{port}")
        assert reply.startswith(b"HTTP/1.1 404") and b"root:" not in reply
        # DNS rebinding: a name other than the loopback address gets nothing
        reply = raw("/api/studies", f"evil.example:{port}")
        assert reply.startswith(b"HTTP/1.1 403") and b"bad_host" in reply
        assert b"b1" not in reply
        assert raw("/api/studies", f"localhost:{port}").startswith(b"HTTP/1.1 200")
        # GETs on every read endpoint change nothing either
        for path in ("/api/studies", "/api/studies/b1", "/api/studies/b1/trials",
                     "/api/studies/b1/events", "/api/studies/b1/curves", "/api/studies/b1/page",
                     f"/api/trials/{tid}", f"/api/trials/{tid}/metrics"):
            assert http("GET", url + path)[0] == 200, path
        after = db_state(jz)
        assert after == before
        # still serving after all that
        assert http("GET", url + "/api/studies")[0] == 200
        assert ctl.poll() is None
    finally:
        stop(ctl, disp)


def read_events(resp, want, timeout=30):
    """Reads SSE frames until every kind in `want` was seen; returns them."""
    got = {}
    end = time.time() + timeout
    kind = None
    while time.time() < end and not want <= set(got):
        line = resp.readline().decode()
        if line.startswith("event: "):
            kind = line[7:].strip()
        elif line.startswith("data: ") and kind:
            got.setdefault(kind, []).append(json.loads(line[6:]))
    return got


def test_stream_pushes_metrics_events_and_trial_states(jz):
    ep, ctl, disp, url = daemons_with_web(jz)
    tok = make_token(jz, "alice")
    try:
        spec = live_spec("s1")
        spec["owner"] = "alice"  # a user steers her own studies only
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running(jz, 2)[0]
        resp = urllib.request.urlopen(url + "/api/studies/s1/stream", timeout=30)
        assert resp.headers["Content-Type"] == "text/event-stream"
        got = read_events(resp, {"hello", "metrics"})
        pts = [p for m in got["metrics"] for p in m["points"]]
        assert pts and all(len(p) == 5 and p[1] in ("lr", "score") for p in pts)
        mark = got["hello"][0]["metric"]
        (stored,) = jz.sql("SELECT COUNT(*) FROM metrics WHERE rowid > ?", mark)[0]
        assert stored >= len(pts)
        # a change through the API shows up as an event on the stream
        threading.Thread(target=http, args=("POST", url + f"/api/trials/{tid}/stop"),
                         kwargs={"token": tok}, daemon=True).start()
        got = read_events(resp, {"events", "trials"})
        kinds = [(e["kind"], e["who"]) for evs in got["events"] for e in evs]
        assert ("instruction", "web:alice") in kinds
        resp.close()
        # a stream for one trial carries only that trial's points
        other = [r[0] for r in jz.sql("SELECT id FROM trials WHERE state='running'")][0]
        resp = urllib.request.urlopen(url + f"/api/studies/s1/stream?trial={other}&metric=0",
                                      timeout=30)
        got = read_events(resp, {"metrics"})
        assert {p[0] for m in got["metrics"] for p in m["points"]} == {other}
        resp.close()
        http("POST", url + "/api/studies/s1/stop", token=tok)
    finally:
        stop(ctl, disp)


def test_stream_sends_an_instruction_again_when_it_settles(jz):
    ep, ctl, disp, url = daemons_with_web(jz)
    tok = make_token(jz, "alice")
    try:
        spec = live_spec("s1")
        spec["owner"] = "alice"  # a user steers her own studies only
        spec["trial"]["env"]["ACK_DELAY_S"] = "3"
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running(jz)[0]
        resp = urllib.request.urlopen(url + "/api/studies/s1/stream", timeout=30)
        read_events(resp, {"hello"})
        done = []
        threading.Thread(target=lambda: done.append(
            http("POST", url + f"/api/trials/{tid}/set", {"values": {"lr": 0.07}}, token=tok)),
            daemon=True).start()
        # sent once while the trial has not acknowledged it ...
        got = read_events(resp, {"events"})
        (ev,) = [e for evs in got["events"] for e in evs if e["kind"] == "instruction"]
        assert ev["applied"] is None and ev["trial"] == tid
        # ... and again, settled, once it has
        got = read_events(resp, {"resolved"})
        (res,) = [e for evs in got["resolved"] for e in evs]
        assert res["id"] == ev["id"] and res["applied"] is True and res["latency_s"] >= 2.5
        jz.wait_for(lambda: done, 30, "the set's answer")
        assert done[0][0] == 200
        resp.close()
    finally:
        stop(ctl, disp)


def test_serve_and_run_options(jz):
    # no database: a clear error, exit 1
    p = jz.run("serve", "--db", os.path.join(jz.dir, "missing.db"), "--http", "127.0.0.1:0")
    assert p.returncode == 1 and "missing.db" in p.stderr
    make_token(jz, "alice")  # creates the database
    for bad in ("nohost", "127.0.0.1:99999", "999.1.1.1:80", "127.0.0.1:x"):
        p = jz.run("serve", "--db", jz.db, "--http", bad)
        assert p.returncode == 2 and "--http" in p.stderr, bad  # a usage error
    web, url = serve(jz)
    try:
        port = url.rsplit(":", 1)[1]
        assert url.startswith("http://127.0.0.1:")
        p = jz.run("serve", "--db", jz.db, "--http", "127.0.0.1:" + port)
        assert p.returncode == 1 and "cannot listen" in p.stderr
    finally:
        stop(web)
    # `jizhi run --http` serves the page while the study runs
    spec = base_spec("quick", ["sh", "-c", "jizhi report score=1"], trials=2, parallel=1)
    p = jz.run("run", jz.write_spec(spec), "--db", jz.db, "--http", "127.0.0.1:0", check=0)
    assert "web dashboard at http://127.0.0.1:" in p.stderr


def test_study_summary_counts_the_trials_study_extend_added(jz):
    """total and progress are against the budget `jizhi study list` shows:
    budget.trials plus what `study extend` added (review35 item 4)."""
    ctl = web_popen(jz, "controller", "--db", jz.db, "--log",
                    os.path.join(jz.dir, "controller.log"), "--http", "127.0.0.1:0")
    try:
        url = wait_url(ctl)
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 30, "the endpoint file")
        # no dispatcher: the trials wait, and the numbers stay put
        jz.run("study", "submit", jz.write_spec(live_spec("ext", trials=2)), check=0)
        jz.run("study", "extend", "ext", "--trials", "3", check=0)
        p = jz.run("study", "list", check=0)
        (row,) = [l.split() for l in p.stdout.splitlines() if l.startswith("ext ")]
        assert row[2].endswith("/5"), p.stdout  # TRIALS: made/budget
        st, j, _ = http("GET", url + "/api/studies")
        assert st == 200 and j["studies"][0]["total"] == 5, j
        st, j, _ = http("GET", url + "/api/studies/ext")
        assert st == 200 and j["total"] == 5 and j["progress"] == 0, j
    finally:
        stop(ctl)
