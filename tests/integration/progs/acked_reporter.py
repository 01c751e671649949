"""A trial that reports `score` every step, waits until the controller has
acknowledged it (flush), and only then appends "TRIAL STEP" to $ACK_LOG,
so the test knows exactly which points were acknowledged. With HOLD_FILE,
after its first acknowledged step it waits until that file exists. With
PER_FLUSH=N, each of the STEPS rounds reports N steps of `score` and
`aux` (NaN every 7th step) before it flushes: batches of 2N points in one
message."""
import os
import time

import jizhi

t = jizhi.Trial()
x = t.param("x", 0.0)
steps = int(os.environ.get("STEPS", "30"))
log = os.environ["ACK_LOG"]
hold = os.environ.get("HOLD_FILE")
per = int(os.environ.get("PER_FLUSH", "0"))
for step in range(1, steps + 1):
    if per:
        done = range((step - 1) * per + 1, step * per + 1)
        for s in done:
            t.report(s, score=x + s, aux=float("nan") if s % 7 == 0 else s * 0.25)
    else:
        done = [step]
        t.report(step, score=x + step)
    if t.flush(120000):
        with open(log, "a") as f:
            f.write("".join(f"{t.trial_id} {s}\n" for s in done))
    while hold and not os.path.exists(hold):
        time.sleep(0.02)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
t.close()
