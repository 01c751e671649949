"""A trial that reports `score` = its step every step, waits until each
report is acknowledged and only then appends "TRIAL ATTEMPT STEP" to
$ACK_LOG (so a test knows exactly what was acknowledged). It saves a
checkpoint (the step, in a file) every $CKPT_EVERY steps and when asked,
exits cleanly on stop, and continues after $JIZHI_LOAD_CHECKPOINT's step
when started from one. $STEPS steps of $STEP_SLEEP seconds. With
$IGNORE_CHECKPOINT set it never answers a checkpoint instruction, and it
saves none after step $CKPT_UNTIL."""
import os
import time

import jizhi

t = jizhi.Trial()
steps = int(os.environ.get("STEPS", "60"))
every = int(os.environ.get("CKPT_EVERY", "10"))
until = int(os.environ.get("CKPT_UNTIL", "1000000000"))
ignore = bool(os.environ.get("IGNORE_CHECKPOINT"))
pause = float(os.environ.get("STEP_SLEEP", "0.05"))
log = os.environ["ACK_LOG"]
attempt = os.environ.get("JIZHI_ATTEMPT", "?")


def save(step):
    path = os.path.join(t.checkpoint_dir, f"step-{step}")
    with open(path, "w") as f:
        f.write(str(step))
    t.checkpoint_done(step, path)


start = 1
load = os.environ.get("JIZHI_LOAD_CHECKPOINT")
if load:
    with open(load) as f:
        start = int(f.read()) + 1
step = start
while step <= steps:
    for ins in t.poll():
        if ins.kind == "checkpoint" and not ignore:
            save(step - 1)
        elif ins.kind == "stop":
            t.close()
            raise SystemExit(0)
    t.report(step, score=float(step))
    if t.flush(120000):
        with open(log, "a") as f:
            f.write(f"{t.trial_id} {step}\n")
    if step % every == 0 and step <= until:
        save(step)
    step += 1
    time.sleep(pause)
t.close()
