"""A fake trial with two objectives and a constraint metric: a = x,
b = (1 - sqrt(x)) * (1 + y), mem = 10 y (the tests bound mem). Sleeps
$TRIAL_SLEEP seconds first."""
import math
import os
import time

import jizhi

time.sleep(float(os.environ.get("TRIAL_SLEEP", "0")))
t = jizhi.Trial()
x, y = float(t.param("x", 0.5)), float(t.param("y", 0.5))
t.report(1, a=x, b=(1 - math.sqrt(x)) * (1 + y), mem=10 * y)
t.close()
