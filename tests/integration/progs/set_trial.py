"""A trial for live changes: `set` of a parameter it has (JIZHI_PARAMS) is
applied (and reported as that metric when it is a number), any other name
is refused with "unknown parameter NAME". With CKPT=1 it saves a
checkpoint when asked (else the helper refuses the checkpoint for it:
"the program wrote no checkpoint"); stop ends it cleanly. With NEVER_POLL=1
it reports but never polls for instructions. Reports `score` every step."""
import json
import os
import time

import jizhi

t = jizhi.Trial()
params = json.loads(os.environ.get("JIZHI_PARAMS", "{}"))
never_poll = os.environ.get("NEVER_POLL") == "1"
can_ckpt = os.environ.get("CKPT") == "1"
step = 0
while step < int(os.environ.get("STEPS", "4000")):
    for ins in [] if never_poll else t.poll():
        if ins.kind == "set":
            if ins.name in params:
                params[ins.name] = ins.value
                t.ack(ins, True)
            else:
                t.ack(ins, False, f"unknown parameter {ins.name}")
        elif ins.kind == "checkpoint" and can_ckpt:
            path = os.path.join(t.checkpoint_dir, f"step-{step}")
            with open(path, "w") as f:
                f.write(str(step))
            t.checkpoint_done(step, path)
        elif ins.kind == "stop":
            t.close()
            raise SystemExit(0)
    nums = {k: float(v) for k, v in params.items() if isinstance(v, (int, float))}
    t.report(step, score=float(step), **nums)
    step += 1
    time.sleep(0.05)
t.close()
