"""Issue 36 item 8: a trial that reports a non-finite value (a diverged
loss: inf, -inf, nan) as its objective or as a metric. Before the fix the
inf trial vanished from `trial list`, `study show`, `trial show` and the
exports, GET /api/trials/ID answered 200 with an empty body, and a nan was
taken for "no value" (the trial failed as "exited without reporting").

Every output must carry the values as the strings "inf", "-inf", "nan"
(valid JSON; the same words in tables and CSV), no trial may be dropped,
and they rank worst in either direction: the best trial is a finite one."""
import csv
import io
import json
import os

from conftest import base_spec
from test_recovery import stop
from webutil import daemons_with_web, http

# the value each trial reports, by grid order; the finite ones bracket them
VALUES = ["1", "inf", "nan", "-inf", "2"]
NON_FINITE = {"inf", "-inf", "nan"}


def values_spec(name, mode):
    """Each trial reports its `v` as the objective `score` and as `loss`."""
    spec = base_spec(name, ["jizhi", "report", "score={v}", "loss={v}"],
                     trials=len(VALUES), parallel=1)
    spec["objective"]["mode"] = mode
    spec["scheduler"] = {"type": "grid"}
    spec["space"] = {"v": {"type": "choice", "values": VALUES}}
    return spec


def as_value(x):
    """A JSON value as the text the trial reported ("inf", "1", ...)."""
    if isinstance(x, str):
        return x
    assert isinstance(x, (int, float)), x
    return f"{x:g}"


def check_trials_json(trials):
    """Every trial is there, completed, with the value it reported."""
    assert len(trials) == len(VALUES), trials
    for t in trials:
        v = t["params"]["v"]
        assert t["state"] == "completed", t
        assert as_value(t["value"]) == v and as_value(t["last_value"]) == v, t
        if v in NON_FINITE:
            assert t["value"] == v and t["best_value"] == v  # a string, not null
        if "metrics" in t:
            assert as_value(t["metrics"]["score"]) == v
            assert as_value(t["metrics"]["loss"]) == v


def check_table(text):
    """`trial list` / `study show`: a row per trial, the value printed."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 7 and f[0].isdigit():
            rows[json.loads(f[6])["v"]] = f
    assert set(rows) == set(VALUES), text
    for v, f in rows.items():
        assert f[1] == "completed" and f[5] == v, (v, f)


def test_non_finite_values_in_every_cli_output_and_the_api(jz):
    ep, ctl, disp, url = daemons_with_web(jz)
    try:
        jz.run("study", "submit", jz.write_spec(values_spec("nf", "max")), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM trials WHERE state IN "
                                   "('completed','failed','stopped')")[0][0] == len(VALUES),
                    90, "every trial to end")
        # the store keeps them: inf as REAL, nan as its own text (NULL is none)
        stored = dict(jz.sql("SELECT p.value, t.value FROM trials t JOIN params p "
                             "ON p.trial_id = t.id AND p.name = 'v'"))
        assert stored['"nan"'] == "nan" and stored['"inf"'] == float("inf")
        assert stored['"-inf"'] == float("-inf")

        for via in ([], ["--controller", ep]):  # the database file, the controller
            check_table(jz.run("trial", "list", "nf", *via, check=0).stdout)
            check_table(jz.run("study", "show", "nf", *via, check=0).stdout)
            check_trials_json(json.loads(jz.run("trial", "list", "nf", "--json", *via,
                                                check=0).stdout))
            show = json.loads(jz.run("study", "show", "nf", "--json", *via, check=0).stdout)
            check_trials_json(show["trials"])
            for t in show["trials"]:
                one = json.loads(jz.run("trial", "show", str(t["id"]), "--json", *via,
                                        check=0).stdout)
                assert one["value"] == t["value"] and one["metrics"] == t["metrics"]
                text = jz.run("trial", "show", str(t["id"]), *via, check=0).stdout
                value_line = [l for l in text.splitlines() if l.startswith("value ")]
                assert value_line and value_line[0].split()[1] == t["params"]["v"], text

        # the exports: a row per trial, the words in the cells
        out = jz.run("study", "export", "nf", "--format", "csv", check=0).stdout
        table = list(csv.DictReader(io.StringIO(out)))
        assert sorted(r["param_v"] for r in table) == sorted(VALUES)
        for r in table:
            assert r["value"] == r["metric_score"] == r["metric_loss"] == r["param_v"], r
        check_trials_json(json.loads(jz.run("study", "export", "nf", "--format", "json",
                                            check=0).stdout))
        curves = list(csv.DictReader(io.StringIO(
            jz.run("study", "export", "nf", "--format", "curves", check=0).stdout)))
        assert sorted(r["value"] for r in curves if r["metric"] == "loss") == sorted(VALUES)

        # the web API: non-empty, valid JSON with the strings
        st, j, _ = http("GET", url + "/api/studies/nf/trials")
        assert st == 200
        by_v = {t["params"]["v"]: t for t in j["trials"]}
        assert set(by_v) == set(VALUES)
        for v, t in by_v.items():
            assert as_value(t["value"]) == v and as_value(t["best_value"]) == v
            st, body, _ = http("GET", url + f"/api/trials/{t['id']}", raw=True)
            assert st == 200 and body, (v, body)
            one = json.loads(body)
            assert as_value(one["value"]) == v and as_value(one["metrics"]["loss"]) == v
        st, j, _ = http("GET", url + "/api/studies/nf/page?points=auto")
        assert st == 200 and len(j["trials"]) == len(VALUES)

        # ranked worst: the best is the best finite one
        st, j, _ = http("GET", url + "/api/studies")
        (s,) = j["studies"]
        assert s["best"]["trial"] == by_v["2"]["id"] and s["best"]["value"] == 2
    finally:
        stop(ctl, disp)


def test_non_finite_values_rank_worst_in_either_direction(jz):
    # max: inf is no better than 2; min: -inf is no better than 1. The run's
    # progress line is the controller's ranking, its summary the store's.
    for mode, best in (("max", "2"), ("min", "1")):
        name = "nf-" + mode
        p = jz.run("run", jz.write_spec(values_spec(name, mode), name + ".json"),
                   "--log-dir", os.path.join(jz.dir, "logs"), check=0)
        rows = dict(jz.sql("SELECT p.value, t.id FROM trials t JOIN studies s ON "
                           "s.id = t.study_id AND s.name = ? JOIN params p ON "
                           "p.trial_id = t.id AND p.name = 'v'", name))
        want = rows[json.dumps(best)]
        assert f"best trial {want}: score={best}" in p.stdout, p.stdout
        assert f"best score={best} (trial {want})" in p.stderr, p.stderr
        # every trial completed, none lost or failed, the nan one included
        assert f"{len(VALUES)} trials ({len(VALUES)} completed, 0 pruned, 0 failed" in p.stdout
