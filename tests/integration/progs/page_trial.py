"""A fake trial for the page tests (test_web_page2.py): two objectives a
and b (both min), a conditional `mom` and a const `c` in its space. It
writes a line naming itself to stdout and one to stderr; with x < $ONE_BELOW
it reports once (a = 50, far above the others) and ends, as a trial
stopped at its first evaluation; else 6 steps with a in [0, 1]."""
import math
import os
import sys

import jizhi

t = jizhi.Trial()
x = float(t.param("x", 0.5))
print(f"page-trial says hello x={x:.4f} opt={t.params.get('opt')}", flush=True)
print("page-trial note on stderr", file=sys.stderr, flush=True)
if x < float(os.environ.get("ONE_BELOW", "0")):
    t.report(1, a=50.0, b=50.0)
else:
    for step in range(1, 7):
        t.report(step, a=x + 0.5 / step, b=(1 - math.sqrt(x)) + 0.5 / step)
t.close()
