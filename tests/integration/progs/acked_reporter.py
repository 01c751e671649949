"""A trial that reports `score` every step, waits until the controller has
acknowledged it (flush), and only then appends "TRIAL STEP" to $ACK_LOG,
so the test knows exactly which points were acknowledged. With HOLD_FILE,
after its first acknowledged step it waits until that file exists."""
import os
import time

import jizhi

t = jizhi.Trial()
x = t.param("x", 0.0)
steps = int(os.environ.get("STEPS", "30"))
log = os.environ["ACK_LOG"]
hold = os.environ.get("HOLD_FILE")
for step in range(1, steps + 1):
    t.report(step, score=x + step)
    if t.flush(120000):
        with open(log, "a") as f:
            f.write(f"{t.trial_id} {step}\n")
    while hold and not os.path.exists(hold):
        time.sleep(0.02)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
t.close()
