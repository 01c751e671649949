"""A fake trial for the search-space tests: records its JIZHI_PARAMS and
argv (one JSON line per trial in $PARAMS_LOG) and reports score = x, or
-1 when the params have no x. Sleeps $TRIAL_SLEEP seconds first."""
import json
import os
import sys
import time

import jizhi

time.sleep(float(os.environ.get("TRIAL_SLEEP", "0")))
t = jizhi.Trial()
with open(os.environ["PARAMS_LOG"], "a") as f:
    f.write(json.dumps({"params": json.loads(os.environ.get("JIZHI_PARAMS", "{}")),
                        "argv": sys.argv[1:]}) + "\n")
x = t.params.get("x")
t.report(1, score=float(x) if x is not None else -1.0)
t.close()
