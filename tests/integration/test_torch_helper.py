"""jizhi.torch (trial_helper/python/jizhi/torch.py) against real daemons:
each instruction kind on a running PyTorch trial (every param group set,
the loader rebuilt with a new batch size, refusals with their reason,
pause/resume, stop), the checkpoint/load round trip restoring bit-identical
training (live and in a restarted process), two gloo DDP ranks applying a
`trial set lr` at the same step, PBT on examples/torch/train.py (exploit
through torch checkpoints), and `pause --release` + `resume` continuing
from the checkpoint.

Trials run Debian's /usr/bin/python3 (python3-torch, CPU) on small
Fashion-MNIST subsets; the tests skip, saying why, where it has no torch
or the dataset is missing.
"""
import json
import os
import subprocess
import textwrap
import time

import pytest

from conftest import ROOT, base_spec
from test_pbt import instructions
from test_recovery import stop
from torchutil import EXAMPLE, PY, daemons, needs_fmnist, needs_torch, records

pytestmark = [needs_torch(), needs_fmnist()]

# A trial: a tiny CNN with two param groups (the second at 10x the lr), a
# ctl.loader at batch 16, one JSON line per step in $LOG with what the
# optimizer and the loader hold after ctl.step.
TRIAL = textwrap.dedent("""
    import json, os, sys, time
    import torch, torch.nn.functional as F
    sys.path.insert(0, %(example)r)
    from train import fashion_mnist, Net
    import jizhi, jizhi.torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    t = jizhi.Trial()
    model = Net(4)
    lr = t.param("lr", 0.01)
    groups = [{"params": list(model.c1.parameters()) + list(model.c2.parameters())},
              {"params": list(model.fc.parameters()), "lr": lr * 10}]
    if os.environ.get("OPT") == "adam":
        opt = torch.optim.Adam(groups, lr=lr)
    else:
        opt = torch.optim.SGD(groups, lr=lr, momentum=0.9, weight_decay=1e-4)
    ctl = jizhi.torch.attach(t, opt, model=model, report_every=5)
    loader = ctl.loader(fashion_mnist("train", 1024), batch_size=16, shuffle=True, epochs=1000)
    log = open(os.environ["LOG"], "a")
    keys = ("lr", "momentum", "weight_decay", "betas", "eps")
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        ok = ctl.step(loss=loss)
        rec = {"step": ctl.global_step, "bs": len(y), "lbs": loader.batch_size,
               "groups": [{k: g[k] for k in keys if k in g} for g in opt.param_groups]}
        log.write(json.dumps(rec) + "\\n")
        log.flush()
        if not ok:
            log.write(json.dumps({"stopped": ctl.global_step}) + "\\n")
            break
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.02")))
    t.close()
""") % {"example": EXAMPLE}


def write(jz, name, text):
    path = os.path.join(jz.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def submit_trial(jz, name, env, program=TRIAL, trials=1):
    prog = write(jz, name + ".py", program)
    spec = base_spec(name, [PY, prog], trials=trials, parallel=trials, env=env)
    spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.011}}
    spec["trial"]["timeout_s"] = 120
    jz.run("study", "submit", jz.write_spec(spec), check=0)
    jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics")[0][0] > 0, 60,
                "a reporting trial")
    return jz.sql("SELECT id FROM trials WHERE state='running' ORDER BY id")[0][0]


def first(recs, cond):
    return next(r for r in recs if "step" in r and cond(r))


def test_set_reaches_every_param_group_and_rebuilds_the_loader(jz):
    ctl, disp = daemons(jz)
    log = os.path.join(jz.dir, "steps.log")
    try:
        tid = submit_trial(jz, "tset", {"LOG": log})
        # lr=0.02 lies outside the study's space [0.01, 0.011]: --force
        for kv in ("lr=0.02", "momentum=0.5", "weight_decay=0.003", "batch_size=32"):
            p = jz.run("trial", "set", str(tid), kv, "--force")
            assert p.returncode == 0 and "acknowledged" in p.stdout, p.stdout + p.stderr
        jz.wait_for(lambda: any(r.get("lbs") == 32 for r in records(log)[-3:-1]), 30,
                    "steps after the sets")
        recs = records(log)
        last = recs[-1]["groups"]
        # every group: lr keeps the groups' 1:10 ratio, the others are equal
        assert [g["lr"] for g in last] == pytest.approx([0.02, 0.2])
        assert [g["momentum"] for g in last] == [0.5, 0.5]
        assert [g["weight_decay"] for g in last] == [0.003, 0.003]
        before = recs[0]["groups"]
        assert before[0]["momentum"] == 0.9 and before[1]["lr"] == pytest.approx(10 * before[0]["lr"])
        # the loader is rebuilt at the next step: the step after the set reads 32
        s = first(recs, lambda r: r["lbs"] == 32)["step"]
        assert all(r["bs"] == 16 for r in recs if r["step"] <= s)
        assert [r["bs"] for r in recs if r["step"] == s + 1] == [32]

        # the program's refusals, with the reason, and nothing changed (--force
        # takes lr=-1 past the controller's own check of the space)
        for kv, why in (("betas=0.9,0.99", "SGD has no betas"), ("eps=1e-8", "SGD has no eps"),
                        ("colour=5", "no handler for parameter 'colour'"),
                        ("lr=-1", "out of range"), ("batch_size=2.5", "not an integer")):
            p = jz.run("trial", "set", str(tid), kv, "--force")
            assert p.returncode == 1 and why in p.stderr, (kv, p.stdout, p.stderr)
        n = len(records(log))
        jz.wait_for(lambda: len(records(log)) > n + 2, 30, "more steps")
        assert records(log)[-1]["groups"] == last

        # pause holds every step, resume continues
        jz.run("trial", "pause", str(tid), check=0)
        time.sleep(0.3)
        n = len(records(log))
        time.sleep(1.0)
        assert len(records(log)) == n, "a paused trial made progress"
        jz.run("trial", "resume", str(tid), check=0)
        jz.wait_for(lambda: len(records(log)) > n + 2, 30, "progress after resume")

        # stop: step() returns False, the program ends, the trial is stopped
        jz.run("trial", "stop", str(tid), check=0)
        jz.wait_trial_state(tid, "stopped", 30, "the trial to stop")
        assert "stopped" in records(log)[-1]
        ev = json.loads(jz.run("study", "events", "tset", "--json", check=0).stdout)
        ins = [(e["detail"]["kind"], e["applied"]) for e in ev if e["kind"] == "instruction"]
        assert ins.count(("set", True)) == 4 and ins.count(("set", False)) == 5
        assert ("pause", True) in ins and ("resume", True) in ins and ("stop", True) in ins
    finally:
        stop(ctl, disp)


def test_adam_betas_and_eps_on_every_group_momentum_refused(jz):
    ctl, disp = daemons(jz)
    log = os.path.join(jz.dir, "steps.log")
    try:
        tid = submit_trial(jz, "tadam", {"LOG": log, "OPT": "adam"})
        for kv in ("betas=0.85,0.995", "beta1=0.8", "eps=1e-6"):
            jz.run("trial", "set", str(tid), kv, check=0)
        p = jz.run("trial", "set", str(tid), "momentum=0.5")
        assert p.returncode == 1 and "Adam has no momentum" in p.stderr, p.stderr
        n = len(records(log))
        jz.wait_for(lambda: len(records(log)) > n + 1, 30, "steps after the sets")
        last = records(log)[-1]["groups"]
        assert [g["betas"] for g in last] == [[0.8, 0.995], [0.8, 0.995]]
        assert [g["eps"] for g in last] == [1e-6, 1e-6]
        jz.run("trial", "stop", str(tid), check=0)
    finally:
        stop(ctl, disp)


# Standalone: k steps, save, m steps; load, the same m steps again; a fresh
# process started with JIZHI_LOAD_CHECKPOINT runs the same m steps too.
ROUND_TRIP = textwrap.dedent("""
    import json, os, sys, random
    import torch, torch.nn as nn, torch.nn.functional as F
    sys.path.insert(0, %(example)r)
    from train import fashion_mnist, Net
    import jizhi, jizhi.torch
    torch.manual_seed(1)
    torch.set_num_threads(1)
    model = nn.Sequential(Net(4), nn.Dropout(0.3))      # dropout: the RNG matters
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.7)
    t = jizhi.Trial()
    ctl = jizhi.torch.attach(t, opt, model=model, scheduler=sched)
    it = iter(ctl.loader(fashion_mnist("train", 300), batch_size=32, shuffle=True, epochs=100))
    def train(n):
        out = []
        for _ in range(n):
            x, y = next(it)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            ctl.step(loss=loss)
            out.append([ctl.global_step, loss.item(), random.random()])
        return out
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "first":
        train(6)
        ctl._set("batch_size", 24)                      # as a live set would
        train(2)
        ctl.save(path)
        a = train(7)
        ctl.load(path)
        b = train(7)
        print(json.dumps({"a": a, "b": b}))
    else:                                               # resumed from JIZHI_LOAD_CHECKPOINT
        print(json.dumps({"c": train(7)}))
""") % {"example": EXAMPLE}


def test_checkpoint_load_round_trip_is_bit_identical(tmp_path):
    prog = tmp_path / "rt.py"
    prog.write_text(ROUND_TRIP)
    ck = str(tmp_path / "ck.pt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JIZHI_")}
    env["PYTHONPATH"] = os.path.join(ROOT, "trial_helper", "python")
    env["JIZHI_LIB"] = os.path.join(os.environ.get("JIZHI_BUILD", os.path.join(ROOT, "build")),
                                    "lib", "libjizhi.so")
    p = subprocess.run([PY, str(prog), "first", ck], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["a"][0][0] == 9 and out["a"] == out["b"]
    p = subprocess.run([PY, str(prog), "again", ck], env=dict(env, JIZHI_LOAD_CHECKPOINT=ck),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["c"] == out["a"]
    assert "resumed from" in p.stderr


# Two gloo ranks started by hand as torchrun would; rank 1 has no trial
# identity (it runs standalone, as libjizhi does on ranks other than 0).
DDP = textwrap.dedent("""
    import json, os, socket, subprocess, sys, time
    if "RANK" not in os.environ:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        procs = []
        for r in range(2):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            if r:
                for k in ("JIZHI_TRIAL", "JIZHI_TOKEN", "JIZHI_ENDPOINT"):
                    env.pop(k, None)
            procs.append(subprocess.Popen([sys.executable, __file__], env=env))
        sys.exit(max(p.wait() for p in procs))
    import gc, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    sys.path.insert(0, %(example)r)
    from train import fashion_mnist, Net
    import jizhi, jizhi.torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = jizhi.Trial()
    net = nn.parallel.DistributedDataParallel(Net(4))
    opt = torch.optim.SGD(net.parameters(), lr=t.param("lr", 0.01), momentum=0.9)
    ctl = jizhi.torch.attach(t, opt, model=net, report_every=5)
    log = open(os.environ["LOG"] + ".%%d" %% rank, "a")
    for x, y in ctl.loader(fashion_mnist("train", 1024), batch_size=16, shuffle=True,
                           epochs=1000):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        ok = ctl.step()
        log.write(json.dumps({"step": ctl.global_step, "lr": opt.param_groups[0]["lr"],
                              "t": time.time()}) + "\\n")
        log.flush()
        if not ok:
            break
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.02")))
    t.close()
    del ctl, opt, net  # the DDP model (its reducer holds the group) before the group
    gc.collect()
    dist.destroy_process_group()
""") % {"example": EXAMPLE}


def test_ddp_set_lr_reaches_both_ranks_at_the_same_step(jz):
    ctl, disp = daemons(jz)
    log = os.path.join(jz.dir, "rank")
    try:
        tid = submit_trial(jz, "tddp", {"LOG": log}, program=DDP)
        for lr in ("0.0333", "0.0444"):  # outside the space [0.01, 0.011]: --force
            p = jz.run("trial", "set", str(tid), "lr=" + lr, "--force")
            assert p.returncode == 0 and "acknowledged" in p.stdout, p.stdout + p.stderr
            # acknowledged means applied on both ranks: at the same step
            steps = []
            for r in (0, 1):
                jz.wait_for(lambda: any(x["lr"] == float(lr) for x in records(log + ".%d" % r)),
                            30, "rank %d to log lr %s" % (r, lr))
                steps.append(first(records(log + ".%d" % r), lambda x: x["lr"] == float(lr))["step"])
            assert steps[0] == steps[1], steps
        # refusals come back with the ranks' reason (review37 item 1: rank 0's
        # acknowledgement came after the helper had settled them as applied)
        for arg, why in (("lr=-1", "jizhi.torch: lr: -1"),
                         ("bogus=1", "no handler for parameter 'bogus'")):
            p = jz.run("trial", "set", str(tid), arg, "--force", check=1)
            assert why in p.stderr, p.stdout + p.stderr
        params = json.loads(jz.run("trial", "show", str(tid), "--json").stdout)["params"]
        assert params["lr"] == 0.0444 and "bogus" not in params, params
        # a set on a paused trial is applied while paused (item 2: the helper
        # carried the pause out and blocked in jz_poll); resume goes on with it
        jz.run("trial", "pause", str(tid))
        p = jz.run("trial", "set", str(tid), "lr=0.0555", "--force", "--timeout", "10")
        assert "acknowledged" in p.stdout, p.stdout + p.stderr
        jz.run("trial", "resume", str(tid))
        for r in (0, 1):
            jz.wait_for(lambda: any(x["lr"] == 0.0555 for x in records(log + ".%d" % r)),
                        30, "rank %d to go on with lr 0.0555" % r)
        jz.run("trial", "stop", str(tid), check=0)
        jz.wait_trial_state(tid, "stopped", 30, "both ranks to stop")
        ends = [records(log + ".%d" % r)[-1]["step"] for r in (0, 1)]
        assert ends[0] == ends[1], ends
    finally:
        stop(ctl, disp)


def example_cmd(*extra):
    return [PY, os.path.join(EXAMPLE, "train.py"), "--train-subset", "2000", "--val-size", "500",
            "--width", "4", "--eval-every", "20", "--report-every", "10", *extra]


def test_pbt_on_the_example_exploits_through_torch_checkpoints(jz):
    with open(os.path.join(EXAMPLE, "pbt.json")) as f:
        spec = json.load(f)
    spec["name"] = "tpbt"
    spec["budget"] = {"trials": 2, "parallel": 2}
    spec["scheduler"]["interval"] = 40
    spec["scheduler"]["quantile"] = 0.5
    spec["trial"]["command"] = example_cmd("--epochs", "6")
    spec["trial"]["timeout_s"] = 120
    p = jz.run("run", jz.write_spec(spec), timeout=240)
    assert p.returncode == 0, p.stderr
    loads = [e for e in instructions(jz, "tpbt", "load") if e["applied"] == 1]
    assert loads, instructions(jz, "tpbt", "load")
    went_on = 0
    for e in loads:
        path = e["detail"]["path"]
        assert os.path.basename(path).startswith("ckpt-") and path.endswith(".pt")
        ck_step = int(os.path.basename(path)[5:-3])
        # the receiver went on from the donor's step: its first train report
        # after the load's acknowledgement (reports made before it are stored
        # before it; the event's time is when the load was issued)
        (acked,) = jz.sql("SELECT time + latency_s FROM events WHERE id=?", e["id"])[0]
        after = jz.sql("SELECT MIN(step) FROM metrics WHERE trial_id=? AND name='train_loss' "
                       "AND time>?", e["trial"], acked)[0][0]
        if after is None:  # loaded in its last report interval: the run ended
            continue
        assert ck_step < after <= ck_step + 10, (ck_step, after)
        went_on += 1
    assert went_on, [(e["detail"]["path"], e["trial"]) for e in loads]
    assert all(s == "completed" for (s,) in jz.sql("SELECT state FROM trials"))


def test_pause_release_and_resume_continue_from_the_torch_checkpoint(jz):
    ctl, disp = daemons(jz, slots=1)
    try:
        spec = base_spec("trel", example_cmd("--epochs", "40", "--max-steps", "400"),
                         trials=1, parallel=1)
        spec["objective"] = {"metric": "val_acc", "mode": "max"}
        spec["space"] = {"lr": {"type": "float", "low": 0.01, "high": 0.05, "log": True}}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        jz.wait_for(lambda: (jz.sql("SELECT MAX(step) FROM metrics")[0][0] or 0) >= 30, 60,
                    "training progress")
        (tid,) = jz.sql("SELECT id FROM trials")[0]
        p = jz.run("trial", "pause", str(tid), "--release", check=0)
        assert p.returncode == 0 and "released" in p.stdout, p.stdout + p.stderr
        jz.wait_trial_state(tid, "suspended", 60, "the trial to checkpoint and exit")
        (ckpt, ck_step) = jz.sql("SELECT checkpoint, checkpoint_step FROM trials WHERE id=?",
                                 tid)[0]
        assert os.path.exists(ckpt) and ckpt.endswith("ckpt-%d.pt" % ck_step) and ck_step >= 30
        p = jz.run("trial", "resume", str(tid), check=0)
        assert "restarting" in p.stdout
        jz.wait_for(lambda: jz.sql("SELECT state FROM studies")[0][0] == "finished", 120,
                    "the study to finish")
        (state, attempt) = jz.sql("SELECT state, attempt FROM trials WHERE id=?", tid)[0]
        assert state == "completed" and attempt == 1
        (lo,) = jz.sql("SELECT MIN(step) FROM metrics WHERE trial_id=? AND attempt=1", tid)[0]
        assert ck_step < lo <= ck_step + 10
        (hi,) = jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND attempt=1", tid)[0]
        assert hi == 400  # --max-steps counts the steps before the restart
    finally:
        stop(ctl, disp)


def test_import_jizhi_does_not_import_torch():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "trial_helper", "python"))
    p = subprocess.run([PY, "-c", "import sys, jizhi; print('torch' in sys.modules)"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stderr
