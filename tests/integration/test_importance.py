"""`jizhi study importance`: a study whose score is 3a + 2b + c (d does
nothing) ranks the parameters a > b > c > d with shares near the known
first-order Sobol indices 9:4:1:0 (/14); the web API gives the same
answer; usage and user errors."""
import json
import os

from conftest import base_spec
from webutil import http, serve


def spec(jz, name, trials):
    prog = os.path.join(jz.dir, "score.awk")
    with open(prog, "w") as f:
        f.write('BEGIN { printf "%.9f", 3 * a + 2 * b + c }\n')
    cmd = ["sh", "-c", f'jizhi report score=$(awk -v a=$1 -v b=$2 -v c=$3 -f {prog})',
           "sh", "{a}", "{b}", "{c}"]
    s = base_spec(name, cmd, trials=trials, parallel=4)
    s["space"] = {k: {"type": "float", "low": 0.0, "high": 1.0} for k in "abcd"}
    return s


def test_importance_ranks_known_shares(jz):
    jz.run("run", jz.write_spec(spec(jz, "imp", 32)), check=0, timeout=300)
    out = json.loads(jz.run("study", "importance", "imp", "--json", check=0).stdout)
    assert out["study"] == "imp" and out["trials"] == 32
    names = [p["name"] for p in out["params"]]
    assert names == ["a", "b", "c", "d"]
    want = {"a": 9 / 14, "b": 4 / 14, "c": 1 / 14, "d": 0.0}
    for p in out["params"]:
        assert abs(p["importance"] - want[p["name"]]) < 0.06, out
        assert abs(p["total"] - want[p["name"]]) < 0.08, out
    assert abs(sum(p["importance"] for p in out["params"]) - 1) < 1e-9
    text = jz.run("study", "importance", "imp", check=0).stdout
    assert "from 32 completed trials" in text
    rows = [line.split() for line in text.splitlines()[3:]]
    assert [r[0] for r in rows] == ["a", "b", "c", "d"]
    # the web API answers the same (the page's importance panel draws it)
    web, url = serve(jz)
    try:
        st, j, _ = http("GET", url + "/api/studies/imp/importance")
        assert st == 200 and j["method"] == "sobol-gp"
        del out["study"]
        assert j == out
        st, j, _ = http("GET", url + "/api/studies/nosuch/importance")
        assert st == 404 and j["error"]
    finally:
        web.terminate()
        web.wait(timeout=30)


def test_importance_errors(jz):
    p = jz.run("study", "importance", check=2)
    assert "importance: expected NAME" in p.stderr
    jz.run("run", jz.write_spec(spec(jz, "one", 1)), check=0, timeout=120)
    p = jz.run("study", "importance", "one", check=1)
    assert "1 finished trial with a value" in p.stderr and "at least 2" in p.stderr
    web, url = serve(jz)
    try:
        st, j, _ = http("GET", url + "/api/studies/one/importance")
        assert st == 409 and "at least 2" in j["message"]
    finally:
        web.terminate()
        web.wait(timeout=30)
    p = jz.run("study", "importance", "nosuch", check=1)
    assert "nosuch" in p.stderr
