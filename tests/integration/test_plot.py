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
    assert "trial (its number in the study)" in texts and "step" in texts and "score" in texts
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


def test_plot_marks_stopped_trials_interventions_and_takes_an_x_axis(jz):
    """Every trial with a value is in the history (stopped ones as crosses),
    live changes are marked on their curve, curves are coloured by the
    objective with the best in red, and --x / --log-y / --full-y work."""
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    from test_recovery import start_controller, start_dispatcher, stop
    from conftest import PROGS
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep, 3)
    try:
        spec = base_spec("marks", ["python3", os.path.join(PROGS, "live_trial.py")], trials=3,
                         parallel=3, env={"STEPS": "60"})
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(DISTINCT trial_id) FROM metrics")[0][0] == 3,
                    60, "three reporting trials")
        ids = [r[0] for r in jz.sql("SELECT id FROM trials ORDER BY id")]
        jz.run("trial", "set", str(ids[0]), "lr=0.5", "--force", check=0)  # outside the space
        jz.run("trial", "stop", str(ids[1]), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the study to finish")
    finally:
        stop(ctl, disp)
    states = dict(jz.sql("SELECT id, state FROM trials"))
    assert states[ids[1]] == "stopped" and states[ids[0]] == "completed"
    out = os.path.join(jz.dir, "m.svg")
    jz.run("plot", "marks", "--db", jz.db, "--output", out, check=0)
    root = ET.parse(out).getroot()
    groups = {g.get("id"): g for g in root.iter(SVG + "g") if g.get("id")}
    hist = groups["history"]
    assert [int(el.get("data-trial")) for el in hist.iter(SVG + "path")
            if "stopped-point" in classes(el)] == [ids[1]]
    assert sorted(int(el.get("data-trial")) for el in hist.iter(SVG + "circle")
                  if "point" in classes(el)) == sorted([ids[0], ids[2]])
    curves = {int(el.get("data-trial")): el for el in groups["curves"].iter(SVG + "polyline")
              if "curve" in classes(el)}
    # the best (lr set to 0.5, score = lr) is red and drawn last; the others are blue shades
    assert "best" in classes(curves[ids[0]]) and curves[ids[0]].get("stroke") == "#d62728"
    assert all(curves[i].get("stroke") != "#d62728" for i in ids[1:])
    assert curves[ids[1]].get("stroke-dasharray")  # stopped: dashed
    marks = [el for el in groups["curves"].iter(SVG + "path") if "intervention" in classes(el)]
    titles = [el.find(SVG + "title").text for el in marks]
    assert any(f"trial {ids[0]}: set lr=0.5 by cli" == t for t in titles), titles
    assert any(t.startswith(f"trial {ids[1]}: stop") for t in titles), titles
    # the legend counts each stop once (its instruction, not its end again)
    # and names a person's changes apart from stops
    legend = {t.get("data-kind"): t.text for t in root.iter(SVG + "text")
              if "legend-mark" in classes(t)}
    assert legend == {"change": "a person's change (set, pause, release, resume) (1)",
                      "stop": "stopped by a person (1)"}, legend
    assert len(marks) == 2, titles
    # x = time, a log y scale, the full range: still one vertex per point
    for args, xlabel in ((["--x", "time"], "seconds since the trial's first point"),
                         (["--x", "lr", "--log-y", "--full-y"], "lr")):
        jz.run("plot", "marks", "--db", jz.db, "--output", out, *args, check=0)
        root = ET.parse(out).getroot()
        texts = [t.text or "" for t in root.iter(SVG + "text")]
        assert xlabel in texts
        for el in root.iter(SVG + "polyline"):
            tid = int(el.get("data-trial"))
            (n,) = jz.sql("SELECT COUNT(*) FROM metrics WHERE trial_id=? AND name='score'", tid)[0]
            assert len(el.get("points").split()) == n
    # an x metric nobody reports: a usage error, no file written
    os.remove(out)
    p = jz.run("plot", "marks", "--db", jz.db, "--output", out, "--x", "epoch")
    assert p.returncode == 2 and "epoch" in p.stderr and not os.path.exists(out)


RELEASABLE = """
import os, time, jizhi
t = jizhi.Trial()
lr = t.param("lr", 0.1)
load = os.environ.get("JIZHI_LOAD_CHECKPOINT")
step = int(open(load).read()) + 1 if load else 0
while step < 60:
    for ins in t.poll():
        if ins.kind == "set" and ins.value > 0:
            lr = ins.value
        elif ins.kind == "set":
            t.ack(ins, False, "lr must be positive")
        elif ins.kind == "checkpoint":
            path = os.path.join(t.checkpoint_dir, "ckpt")
            with open(path, "w") as f:
                f.write(str(step))
            t.checkpoint_done(step, path)
        elif ins.kind == "stop":
            t.close()
            raise SystemExit(0)
    t.report(step, score=lr)
    step += 1
    time.sleep(0.05)
t.close()
"""


def test_plot_marks_only_applied_changes_and_a_release_and_its_resume(jz):
    """A change the trial refused is not marked (it did not happen); a
    pause --release is marked as a release, not as a person's stop, and
    the resume that restarts the trial as a resume (review37 item 6)."""
    from test_recovery import start_controller, start_dispatcher, stop
    prog = os.path.join(jz.dir, "releasable.py")
    with open(prog, "w") as f:
        f.write(RELEASABLE)
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep, 1)
    try:
        spec = base_spec("rel", ["python3", prog], trials=1, parallel=1)
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.1}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] >= 3, 60,
                    "the trial to report")
        ((tid,),) = jz.sql("SELECT id FROM trials")
        p = jz.run("trial", "set", str(tid), "lr=-1", "--force")
        assert p.returncode == 1 and "lr must be positive" in p.stderr, p.stderr
        jz.run("trial", "set", str(tid), "lr=0.5", "--force", check=0)
        p = jz.run("trial", "pause", str(tid), "--release")
        assert f"trial {tid}: released" in p.stdout, (p.stdout, p.stderr)
        jz.run("trial", "resume", str(tid), check=0)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 60,
                    "the study to finish")
    finally:
        stop(ctl, disp)
    assert jz.sql("SELECT state FROM trials") == [("completed",)]
    out = os.path.join(jz.dir, "rel.svg")
    jz.run("plot", "rel", "--db", jz.db, "--output", out, check=0)
    root = ET.parse(out).getroot()
    titles = [el.find(SVG + "title").text for el in root.iter(SVG + "path")
              if "intervention" in classes(el)]
    assert titles == [f"trial {tid}: set lr=0.5 by cli", f"trial {tid}: release by cli",
                      f"trial {tid}: resume by cli"], titles
    assert legend_of(root) == {"change": "a person's change (set, pause, release, resume) (3)"}


def test_plot_x_samples_sums_batch_size_when_no_samples_metric(jz):
    prog = os.path.join(jz.dir, "bs.sh")
    with open(prog, "w") as f:
        f.write("#!/bin/sh\nfor s in 0 1 2 3 4; do\n"
                "  jizhi report --step $s batch_size=32 score=$s || exit 1\ndone\n")
    os.chmod(prog, os.stat(prog).st_mode | stat.S_IXUSR)
    jz.run("run", jz.write_spec(base_spec("bs", [prog], trials=1, parallel=1)), timeout=120,
           check=0)
    out = os.path.join(jz.dir, "bs.svg")
    jz.run("plot", "bs", "--db", jz.db, "--output", out, "--x", "samples", check=0)
    root = ET.parse(out).getroot()
    (curve,) = [el for el in root.iter(SVG + "polyline") if "curve" in classes(el)]
    xs = [float(p.split(",")[0]) for p in curve.get("points").split()]
    assert len(xs) == 5 and xs == sorted(xs) and len(set(xs)) == 5
    ticks = [t.text for t in root.iter(SVG + "text") if "tick-label" in classes(t)]
    assert "160" in ticks  # 5 steps x 32 samples
    assert "samples" in [t.text for t in root.iter(SVG + "text")]


def legend_of(root):
    return {t.get("data-kind"): t.text for t in root.iter(SVG + "text")
            if "legend-mark" in classes(t)}


def test_plot_legend_names_pbt_decisions_apart(jz):
    from test_pbt import formula_spec
    spec = formula_spec("pbt-plot", {"type": "pbt", "seed": 5, "interval": 10})
    spec["trial"]["env"] = {"FORMULA_STEPS": "60", "FORMULA_STEP_S": "0.03"}
    p = jz.run("run", jz.write_spec(spec), timeout=90, check=0)
    assert p.returncode == 0, p.stderr
    (n_pbt,) = jz.sql("SELECT COUNT(*) FROM events WHERE kind='instruction' AND who='pbt'")[0]
    assert n_pbt > 0
    out = os.path.join(jz.dir, "pbt.svg")
    jz.run("plot", "pbt-plot", "--db", jz.db, "--output", out, check=0)
    root = ET.parse(out).getroot()
    legend = legend_of(root)
    assert legend == {"pbt": f"PBT: checkpoint, exploit, explore ({n_pbt})"}, legend
    marks = [el for el in root.iter(SVG + "path") if "mark-pbt" in classes(el)]
    assert len(marks) == n_pbt


def test_plot_one_evaluation_is_a_marker_outside_the_robust_range(jz):
    """Trials that report once (a = 50, far above the curves in [0, 1.5])
    are markers, and the robust y range leaves them out."""
    from test_web_page2 import page_spec
    jz.run("run", jz.write_spec(page_spec()), "--slots", "2", check=0)
    single = {t for (t,) in jz.sql("SELECT trial_id FROM metrics WHERE name='a' GROUP BY "
                                   "trial_id HAVING COUNT(*) = 1")}
    assert single
    out = os.path.join(jz.dir, "page.svg")
    jz.run("plot", "page", "--db", jz.db, "--output", out, check=0)
    root = ET.parse(out).getroot()
    curves = [g for g in root.iter(SVG + "g") if g.get("id") == "curves"][0]
    ticks = [float(t.text) for t in curves.iter(SVG + "text")
             if "tick-label" in classes(t) and float(t.get("y", 0)) and t.get("text-anchor") == "end"]
    assert ticks and max(ticks) < 5, ticks
    assert not [el for el in curves.iter() if "single" in classes(el)]  # outside: not drawn
    assert any("one evaluation (%d)" % len(single) in (t.text or "")
               for t in curves.iter(SVG + "text")), [t.text for t in curves.iter(SVG + "text")]
    jz.run("plot", "page", "--db", jz.db, "--output", out, "--full-y", check=0)
    root = ET.parse(out).getroot()
    drawn = {int(el.get("data-trial")) for el in root.iter() if "single" in classes(el)}
    assert drawn == single


def test_plot_refuses_a_metric_no_trial_reported(jz):
    """--metric NAME that no trial reported is refused as --x is: exit 2,
    naming it and the metrics the trials did report; no file written."""
    spec = base_spec("few", ["sh", "-c", "jizhi report --step 1 score=1 loss=2"], trials=1,
                     parallel=1)
    jz.run("run", jz.write_spec(spec), check=0)
    out = os.path.join(jz.dir, "few.svg")
    for opt in ("--metric", "--x"):
        p = jz.run("plot", "few", "--output", out, opt, "nosuch")
        assert p.returncode == 2 and not os.path.exists(out), (opt, p.stderr)
        assert f'plot: {opt} nosuch: no trial of few reported a metric "nosuch"' in p.stderr
        assert "report: loss, score)" in p.stderr, p.stderr
    jz.run("plot", "few", "--output", out, "--metric", "loss", check=0)
    assert os.path.exists(out)


def test_plot_before_any_report_takes_metric_and_x(jz):
    """Before any trial reported a metric, --metric (the objective's or
    another) and --x are not refused: the plot is the empty panel, as
    without them, so a script that plots as the study runs works from the
    start (review36 item 9: exit 2 until the first report)."""
    spec = base_spec("quiet", ["true"], trials=1, parallel=1)  # reports nothing
    jz.run("run", jz.write_spec(spec))
    out = os.path.join(jz.dir, "quiet.svg")
    for opts in ([], ["--metric", "score"], ["--metric", "loss"], ["--x", "samples"],
                 ["--x", "epoch"]):
        p = jz.run("plot", "quiet", "--output", out, *opts)
        assert p.returncode == 0 and "wrote" in p.stdout, (opts, p.stderr)
        ET.parse(out)
        os.unlink(out)
