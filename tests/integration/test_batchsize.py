"""The batch-size scheduler end to end: `jizhi run` over gns_trial.py (a
fake trial with a known B_simple, |G|^2 = 1, and step time 0.002 + 2e-5 B)
and over jizhi-train on a tiny synthetic dataset; and `jizhi
batchsize-eval` (the critical-batch-size mode) from a command, a log and
a stored trial."""
import json
import math
import os
import subprocess

from conftest import JIZHI, PROGS

ALPHA, BETA, B0, LR0 = 0.002, 2e-5, 32, 0.1


def goodput(b, bsimple):
    return b / (ALPHA + BETA * b) * (bsimple + B0) / (bsimple + b)


def gns_spec(name, trials=2, **env):
    e = {"STEPS": "800", "D": "5000", "B_SIMPLE": "1000", "SLEEP": "0.001",
         "ALPHA": str(ALPHA), "BETA": str(BETA)}
    e.update(env)
    return {
        "name": name,
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "batchsize", "seed": 1, "min": 16, "max": 1024,
                      "interval": 100, "warmup": 50},
        "budget": {"trials": trials, "parallel": 2},
        "space": {"lr": {"type": "float", "low": LR0, "high": LR0},
                  "batch_size": {"type": "int", "low": B0, "high": B0}},
        "trial": {"command": ["python3", os.path.join(PROGS, "gns_trial.py")],
                  "timeout_s": 60, "retries": 0, "env": e},
    }


def decisions(jz, tid):
    rows = jz.sql("SELECT detail, applied FROM events WHERE kind='instruction' AND who='batchsize'"
                  " AND trial_id=? ORDER BY id", tid)
    return [(json.loads(d), a) for d, a in rows]


def series(jz, tid, name):
    return jz.sql("SELECT step, value FROM metrics WHERE trial_id=? AND name=? ORDER BY step",
                  tid, name)


def gns_emas(jz, tid, upto_step, count, ema=0.95):
    """The scheduler's smoothed |G|^2 and tr(Sigma) after `count`
    measurements (steps with all four gradient-noise metrics, at most
    `upto_step`), recomputed from the metrics table."""
    rows = jz.sql("SELECT step, name, value FROM metrics WHERE trial_id=? AND attempt=0 AND "
                  "step<=? AND name IN ('grad_sqnorm_small','grad_sqnorm_big','batch_small',"
                  "'batch_big') ORDER BY step", tid, upto_step)
    by_step = {}
    for step, name, value in rows:
        by_step.setdefault(step, {})[name] = value
    eg = et = 0.0
    n = 0
    for step in sorted(by_step):
        m = by_step[step]
        if len(m) < 4 or n == count:
            continue
        bs, bb, gs, gb = m["batch_small"], m["batch_big"], m["grad_sqnorm_small"], m["grad_sqnorm_big"]
        g2 = (bb * gb - bs * gs) / (bb - bs)
        tr = (gs - gb) / (1 / bs - 1 / bb)
        eg = ema * eg + (1 - ema) * g2
        et = ema * et + (1 - ema) * tr
        n += 1
    assert n == count, (n, count)
    corr = 1 - ema ** n
    return eg / corr, et / corr


def test_batchsize_scheduler_on_a_known_noise_scale(jz):
    # by hand: with B_simple = 1000 the goodput-best power of two is 256
    cands = [2 ** k for k in range(4, 11)]
    assert max(cands, key=lambda b: goodput(b, 1000)) == 256
    p = jz.run("run", jz.write_spec(gns_spec("bs")), check=0)
    assert "2 completed" in p.stdout
    for (tid,) in jz.sql("SELECT id FROM trials"):
        dec = decisions(jz, tid)
        sets = [(d, a) for d, a in dec if d["name"] == "batch_size"]
        assert sets, "the scheduler changed the batch size"
        prev = B0
        for d, applied in sets:
            x = d["decision"]
            assert applied == 1
            assert d["reason"].startswith("batchsize: B_simple")
            # the estimate is exactly the bias-corrected EMAs (0.95) of the
            # per-step estimates from the stored measurements it had seen
            g2, tr = gns_emas(jz, tid, x["step"], x["measurements"])
            assert math.isclose(x["grad_sqnorm"], g2, rel_tol=1e-9), (x, g2)
            assert math.isclose(x["trace"], tr, rel_tol=1e-9), (x, tr)
            assert math.isclose(x["b_simple"], tr / g2, rel_tol=1e-9)
            assert x["from"] == prev and x["b0"] == B0
            # the pick maximises goodput under the fitted model among powers of two
            # (or, while one size is known, explores a neighbour)
            alpha, beta, bs = x["alpha"], x["beta"], x["b_simple"]
            g = {b: b / (alpha + beta * b) * (bs + B0) / (bs + b) for b in cands}
            if x["explore"]:
                assert d["value"] in (prev * 2, prev // 2)
            else:
                assert d["value"] == max(g, key=g.get)
                assert x["goodput_gain"] >= 1.1
            # AdaScale: lr0 * (s2 + 1)/(s2/S + 1), s2 = B_simple/B0, S = B/B0
            s2, S = bs / B0, d["value"] / B0
            assert math.isclose(x["lr"], LR0 * (s2 + 1) / (s2 / S + 1), rel_tol=1e-9)
            prev = d["value"]
        # the trial ran at exactly the sizes it was told, in order
        sizes = []
        for _, v in series(jz, tid, "batch_size"):
            if not sizes or sizes[-1] != v:
                sizes.append(v)
        assert sizes == [B0] + [d["value"] for d, _ in sets]
        assert sizes[-1] in (128, 256, 512)
        # a raised rate is warmed up by rising `set lr`, ending at the decision's lr
        lrs = [d for d, _ in dec if d["name"] == "lr"]
        assert len(lrs) >= 2 * len(sets)
        last = sets[-1][0]["decision"]["lr"]
        assert math.isclose(lrs[-1]["value"], last, rel_tol=1e-12)
        assert math.isclose(series(jz, tid, "lr")[-1][1], last, rel_tol=1e-12)
    # the critical-batch-size mode reads a stored trial too
    out = jz.run("batchsize-eval", "--trial", "1", "--json", check=0).stdout
    r = json.loads(out)
    # 80 measurements: the true 1000 lies in the 95% interval, and the
    # estimate is near it (|G|^2 = 1 and tr = 1000 each within 10%)
    assert r["measurements"] >= 40
    assert r["lo"] < 1000 < r["hi"], r
    assert abs(r["b_simple"] - 1000) < 0.15 * 1000, r
    assert abs(r["grad_sqnorm"] - 1) < 0.1 and abs(r["trace"] - 1000) < 100, r


def test_batchsize_eval_estimates_the_critical_batch(jz):
    env = dict(jz.env, JIZHI_PARAMS='{"batch_size": 256}', B_SIMPLE="200", D="5000",
               STEPS="400", SEED="3")
    cmd = ["python3", os.path.join(PROGS, "gns_trial.py")]
    p = subprocess.run([JIZHI, "batchsize-eval", "--json", "--quiet", "--", *cmd], cwd=jz.dir,
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["measurements"] == 40 and r["batch_big"] == 256 and r["batch_small"] == 128
    assert abs(r["b_simple"] - 200) < 0.25 * 200
    assert r["lo"] < 200 < r["hi"]
    # the same run saved as a log gives the same numbers
    log = os.path.join(jz.dir, "run.log")
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=jz.dir, env=env, stderr=f, timeout=60, check=True)
    p2 = jz.run("batchsize-eval", "--log", log, "--json", check=0)
    assert json.loads(p2.stdout) == r
    # text output and errors
    p3 = jz.run("batchsize-eval", "--log", log, check=0)
    assert "critical batch size" in p3.stdout and "95% confidence interval" in p3.stdout
    # a recommended range: powers of two inside [B/2, 2B] and the interval
    lo, hi = r["recommended"]
    assert lo <= hi and lo >= r["b_simple"] / 2 and hi <= 2 * r["b_simple"]
    assert all(x & (x - 1) == 0 for x in (int(lo), int(hi)))
    assert f"recommended batch size: {lo:.0f} .. {hi:.0f}" in p3.stdout
    assert r["trusted"] == (r["hi"] / r["lo"] <= 4)
    # a small batch far below B_simple, few steps: an interval too wide to trust
    short = os.path.join(jz.dir, "short.log")
    with open(short, "w") as f:
        subprocess.run(cmd, cwd=jz.dir, stderr=f, timeout=60, check=True,
                       env=dict(env, JIZHI_PARAMS='{"batch_size": 16}', B_SIMPLE="2000",
                                STEPS="40"))
    p5 = jz.run("batchsize-eval", "--log", short, check=0)
    rs = json.loads(jz.run("batchsize-eval", "--log", short, "--json", check=0).stdout)
    assert not rs["trusted"] and "too wide to trust" in p5.stdout and "tentative" in p5.stdout
    empty = os.path.join(jz.dir, "empty.log")
    open(empty, "w").close()
    p4 = jz.run("batchsize-eval", "--log", empty)
    assert p4.returncode == 1 and "need at least 2" in p4.stderr
    assert jz.run("batchsize-eval").returncode == 2
    assert jz.run("batchsize-eval", "--conf", "2", "--log", log).returncode == 2
    assert "usage: jizhi batchsize-eval" in jz.run("batchsize-eval", "--help", check=0).stdout


def test_batchsize_scheduler_drives_jizhi_train(jz):
    """Mechanics on the real trainer: decisions reach it, it applies them
    (its own batch_size metric shows each), and the rates follow AdaScale."""
    spec = {
        "name": "bs-train",
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "batchsize", "seed": 1, "min": 32, "max": 512, "interval": 40,
                      "warmup": 10, "min_measurements": 2, "min_gain": 0},
        "budget": {"trials": 1, "parallel": 1},
        "space": {"lr": {"type": "float", "low": 0.05, "high": 0.05},
                  "batch_size": {"type": "int", "low": 512, "high": 512}},
        "trial": {"command": ["jizhi-train", "--dataset", "synthetic", "--synthetic-n", "12000",
                              "--val-size", "500", "--hidden", "256,256", "--epochs", "8",
                              "--log-every", "5", "--threads", "1", "--quiet"],
                  "timeout_s": 60, "retries": 0},
    }
    jz.run("run", jz.write_spec(spec), check=0)
    (tid,) = jz.sql("SELECT id FROM trials")[0]
    dec = decisions(jz, tid)
    sets = [d for d, a in dec if d["name"] == "batch_size" and a == 1]
    # starting at the top of [32, 512], any B_simple below a few thousand moves it down
    assert sets, dec
    # each applied size shows in the trainer's own batch_size metric
    seen = {v for _, v in series(jz, tid, "batch_size")}
    assert {d["value"] for d in sets} <= seen
    for d in sets:
        x = d["decision"]
        assert 32 <= d["value"] <= 512 and x["b_simple"] > 0 and x["b0"] == 512
        s2, S = x["b_simple"] / 512, d["value"] / 512
        assert math.isclose(x["lr"], 0.05 * (s2 + 1) / (s2 / S + 1), rel_tol=1e-9)


def test_batchsize_resumes_after_a_controller_kill(jz):
    """kill -9 of the controller while trials adapt: the restarted controller
    restores the scheduler (EMAs, throughput table, last change) and goes
    on: decisions stay at least `interval` steps apart across the restart,
    and the trials still end at a goodput-best size."""
    from test_recovery import kill9_and_restart, start_controller, start_dispatcher, stop

    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    disp = start_dispatcher(jz, ep)
    ctl2 = None
    try:
        jz.run("study", "submit", jz.write_spec(gns_spec("bs-restart", SLEEP="0.004")), check=0)
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM events WHERE who='batchsize'")[0][0] > 0,
                    60, "a first decision")
        ctl2 = kill9_and_restart(jz, ctl, ep)
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish after the restart")
    finally:
        stop(*(p for p in (ctl, ctl2, disp) if p))
    for (tid,) in jz.sql("SELECT id FROM trials"):
        steps = [d["decision"]["step"] for d, _ in decisions(jz, tid) if d["name"] == "batch_size"]
        assert steps and all(b - a >= 100 for a, b in zip(steps, steps[1:])), steps
        assert series(jz, tid, "batch_size")[-1][1] in (128, 256, 512)
