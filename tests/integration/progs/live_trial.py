"""A trial that obeys live instructions: `set lr` changes the lr it reports
from the next step on, unknown keys are refused, pause/resume hold it,
stop ends it cleanly. Reports lr and score (= lr) every step. With
ACK_DELAY_S, a `set lr` is acknowledged that many seconds after it came."""
import os
import time

import jizhi

t = jizhi.Trial()
lr = t.param("lr", 0.1)
steps = int(os.environ.get("STEPS", "400"))
ack_delay = float(os.environ.get("ACK_DELAY_S", "0"))
paused = False
step = 0
while step < steps:
    for ins in t.poll():
        if ins.kind == "set":
            if ins.name == "lr":
                if ack_delay:
                    time.sleep(ack_delay)
                    t.ack(ins, True)
                lr = ins.value
            else:
                t.ack(ins, False, f"unknown parameter {ins.name}")
        elif ins.kind == "pause":
            paused = True
        elif ins.kind == "resume":
            paused = False
        elif ins.kind == "stop":
            t.report(step, score=lr)
            t.close()
            raise SystemExit(0)
    if not paused:
        t.report(step, lr=lr, score=lr)
        step += 1
    time.sleep(0.05)
t.close()
