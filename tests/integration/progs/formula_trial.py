"""A scripted fake trial for the pbt and guard tests (uses `import jizhi`).

Its state is (step, score). Each step the score moves toward 1 at a rate
set by the params: gain = 0.08 * exp(-(log10(lr) - log10(0.1))**2), so
lr = 0.1 is best; score += gain * (1 - score). It reports `score`,
`train_loss` (= 1 - score) and `lr` every step.

Live control: `set lr`; `checkpoint` writes {"step", "score"} to
t.checkpoint_dir and calls t.checkpoint_done; `load` reads a checkpoint
(the donor's state) and takes the new params the helper already holds;
`stop` ends the run. JIZHI_LOAD_CHECKPOINT (the controller's restart
fallback) is loaded at start the same way.

Environment knobs:
  FORMULA_STEPS       steps to run (default 60)
  FORMULA_STEP_S      sleep per step (default 0.03)
  FORMULA_NOPOLL      1: never poll (a program that ignores instructions)
  FORMULA_CKPT_EVERY  N > 0: checkpoint on its own every N steps
  FORMULA_SPIKE_STEP  from this step on, while lr > FORMULA_SPIKE_LR
                      (default 0), report a diverged train_loss:
  FORMULA_SPIKE_KIND  "nan" (default) or "spike" (loss x 20)
"""
import json
import math
import os
import time

import jizhi

t = jizhi.Trial()
lr = t.param("lr", 0.1)
steps = int(os.environ.get("FORMULA_STEPS", "60"))
pause = float(os.environ.get("FORMULA_STEP_S", "0.03"))
nopoll = os.environ.get("FORMULA_NOPOLL") == "1"
ckpt_every = int(os.environ.get("FORMULA_CKPT_EVERY", "0"))
spike_step = int(os.environ.get("FORMULA_SPIKE_STEP", "-1"))
spike_lr = float(os.environ.get("FORMULA_SPIKE_LR", "0"))
spike_kind = os.environ.get("FORMULA_SPIKE_KIND", "nan")

step, score = 0, 0.0


def gain(x):
    return 0.08 * math.exp(-(math.log10(x) - math.log10(0.1)) ** 2)


def save():
    d = t.checkpoint_dir or "."
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "ckpt-%d.json" % step)
    with open(path + ".tmp", "w") as f:
        json.dump({"step": step, "score": score}, f)
    os.replace(path + ".tmp", path)
    t.checkpoint_done(step, path)


def load(path):
    global step, score, lr
    with open(path) as f:
        st = json.load(f)
    step, score = int(st["step"]), float(st["score"])
    lr = t.param("lr", lr)


if os.environ.get("JIZHI_LOAD_CHECKPOINT"):
    load(os.environ["JIZHI_LOAD_CHECKPOINT"])

while step < steps:
    if not nopoll:
        for ins in t.poll():
            if ins.kind == "set" and ins.name == "lr":
                lr = float(ins.value)
            elif ins.kind == "checkpoint":
                save()
            elif ins.kind == "load":
                try:
                    load(ins.path)
                    t.ack(ins, True)
                except (OSError, ValueError, KeyError) as e:
                    t.ack(ins, False, "cannot load %s: %s" % (ins.path, e))
            elif ins.kind == "stop":
                t.close()
                raise SystemExit(0)
    step += 1
    score += gain(lr) * (1 - score)
    loss = 1 - score + 0.01
    if 0 <= spike_step <= step and lr > spike_lr:
        loss = float("nan") if spike_kind == "nan" else loss * 20
    t.report(step, score=score, train_loss=loss, lr=lr)
    if ckpt_every > 0 and step % ckpt_every == 0:
        save()
    time.sleep(pause)
t.close()
