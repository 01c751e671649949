"""A trial that takes a `set` and acknowledges it late: it reports `score`
every step until a set arrives, then writes the file $GOT and waits for
the file $GO (making no call into the helper meanwhile) before it acks
the set as applied, reports the new value three more steps and ends."""
import os
import time

import jizhi

t = jizhi.Trial()
step = 0
while True:
    for ins in t.poll():
        if ins.kind == "set":
            open(os.environ["GOT"], "w").close()
            while not os.path.exists(os.environ["GO"]):
                time.sleep(0.05)
            t.ack(ins, True)
            for _ in range(3):
                t.report(step, score=float(step), **{ins.name: float(ins.value)})
                step += 1
            t.close()
            raise SystemExit(0)
    t.report(step, score=float(step))
    step += 1
    time.sleep(0.05)
