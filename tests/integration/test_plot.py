"""`jizhi plot`: the SVG parses as XML (text from the study escaped), holds
one learning-curve series per trial with one vertex per reported point,
and the history panel one point per completed trial."""
import os
import stat
import xml.etree.ElementTree as ET

from conftest import base_spec

SVG = "{http://www.w3.org/2000/svg}"

CURVE = """#!/bin/sh
# reports score = x * step / 5 for steps 1..5, then fails when x < 0
for s in 1 2 3 4 5; do
    jizhi report --step "$s" score="$(awk "BEGIN{print $1 * $s / 5}")" || exit 1
done
case "$1" in -*) exit 3 ;; esac
"""


def classes(el):
    return el.get("class", "").split()


def run_study(jz):
    prog = os.path.join(jz.dir, "curve.sh")
    with open(prog, "w") as f:
        f.write(CURVE)
    os.chmod(prog, os.stat(prog).st_mode | stat.S_IXUSR)
    spec = base_spec("plot-me", [prog, "{x}"], trials=6, parallel=2)
    # a choice value that needs escaping ends up in the SVG's titles
    spec["space"]["tag"] = {"type": "choice", "values": ["<a&b>", "c\"d'e"]}
    jz.run("run", jz.write_spec(spec), "--slots", "2", timeout=120)
    rows = jz.sql("SELECT id, state FROM trials ORDER BY number")
    assert len(rows) == 6 and all(s in ("completed", "failed") for _, s in rows), rows
    return rows


def test_plot_svg_has_a_series_per_trial_and_a_point_per_completed_trial(jz):
    rows = run_study(jz)
    out = os.path.join(jz.dir, "study.svg")
    p = jz.run("plot", "plot-me", "--db", jz.db, "--output", out, check=0)
    assert out in p.stdout
    root = ET.parse(out).getroot()
    assert root.tag == SVG + "svg"
    groups = {g.get("id"): g for g in root.iter(SVG + "g") if g.get("id")}
    assert {"history", "curves"} <= set(groups)

    # learning curves: one polyline per trial, named after it, one vertex per point
    curves = [el for el in groups["curves"].iter(SVG + "polyline") if "curve" in classes(el)]
    assert len(curves) == len(rows)
    assert sorted(el.get("id") for el in curves) == sorted(f"trial-{tid}" for tid, _ in rows)
    for el in curves:
        tid = int(el.get("data-trial"))
        (n,) = jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=? AND name='score'", tid)[0]
        assert len(el.get("points").split()) == n == 5
    assert any("<a&b>" in (t.text or "") or "c\"d'e" in (t.text or "")
               for t in groups["curves"].iter(SVG + "title"))

    # history: one point per completed trial, and the best-so-far step line
    completed = sorted(tid for tid, s in rows if s == "completed")
    points = [el for el in groups["history"].iter(SVG + "circle") if "point" in classes(el)]
    assert sorted(int(el.get("data-trial")) for el in points) == completed
    assert [el for el in groups["history"].iter(SVG + "path") if "best" in classes(el)]

    # axes with labels and tick labels, and a legend per panel
    texts = [t.text or "" for t in root.iter(SVG + "text")]
    assert "trial number" in texts and "step" in texts and "score" in texts
    assert sum(1 for el in root.iter(SVG + "text") if "tick-label" in classes(el)) >= 8
    assert len([g for g in root.iter(SVG + "g") if "legend" in classes(g)]) == 2


def test_plot_to_stdout_default_name_and_errors(jz):
    run_study(jz)
    p = jz.run("plot", "plot-me", "--db", jz.db, "--output", "-", check=0)
    ET.fromstring(p.stdout)
    p = jz.run("plot", "plot-me", "--db", jz.db, check=0)
    ET.parse(os.path.join(jz.dir, "plot-me.svg"))
    p = jz.run("plot", "nope", "--db", jz.db, check=1)
    assert "no study named" in p.stderr
    jz.run("plot", check=2)
