"""A Python objective that uses the trial helper (`import jizhi`).

It simulates a training curve whose final accuracy depends on the learning
rate (best near 0.05), momentum and the optimizer, reports `val_acc` every
epoch, and obeys live instructions (a new `lr`, stop).
"""
import math
import jizhi

t = jizhi.Trial()
lr = t.param("lr", 0.1)
momentum = t.param("momentum", 0.9)
optimizer = t.param("optimizer", "sgd")
epochs = t.param("epochs", 8)

bonus = {"sgd": 0.0, "lars": 0.01, "lamb": 0.015}.get(optimizer, 0.0)
peak = 0.92 + bonus - 0.04 * (math.log10(lr) - math.log10(0.05)) ** 2 - 0.05 * (momentum - 0.9) ** 2
acc = 0.1
for epoch in range(1, epochs + 1):
    for ins in t.poll():
        if ins.kind == "set" and ins.name == "lr":
            lr = ins.value
        elif ins.kind == "stop":
            t.close()
            raise SystemExit(0)
    acc = acc + (peak - acc) * 0.5
    t.report(epoch, val_acc=acc, epoch=epoch, lr=lr)
t.close()
