"""A trial that polls but handles no instruction (as many programs do):
it reports `score` every step and never acknowledges anything itself."""
import os
import time

import jizhi

t = jizhi.Trial()
steps = int(os.environ.get("STEPS", "400"))
for step in range(steps):
    for ins in t.poll():
        pass
    t.report(step, score=step / steps)
    time.sleep(0.05)
t.close()
