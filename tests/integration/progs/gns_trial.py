"""A scripted fake trial for the batch-size and early-stopping tests.

Gradient noise: per-example gradients g_i = G + noise with |G|^2 = 1 and
tr(Sigma) = B_SIMPLE (so B_simple is known); every LOG steps it reports,
like jizhi-train, train_loss, lr, batch_size, samples_per_s (from the
throughput model step time = ALPHA + BETA*B, no noise) and the
gradient-noise inputs grad_sqnorm_small/big at B_s = B/2 and B_b = B,
simulated from the Gaussian model in D dimensions.

Progress (McCandlish's model): a step of batch B is worth
B*B_simple/(B_simple + B) "useful" examples; val_acc = quality * u/(u + N)
for u useful examples so far, reported with `epoch` (examples/N) every
EPOCH_STEPS steps and at the end. quality = 1 - (x - 0.3)^2 when a param x is given
(for early-stopping tests), else 1 - |log10(lr/0.1)|/10.

Obeys `set batch_size` and `set lr` (acknowledged as applied) and `stop`.
Env: B_SIMPLE (default 1000), ALPHA (0.002), BETA (2e-5), STEPS (400),
LOG (10), EPOCH_STEPS (50), N (10000), SEED (trial id), D (20),
SLEEP (seconds per step, default 0), FLUSH_EPOCH (1: after each epoch's
report, wait until the controller has acknowledged it, so that an
instruction its rules decided on that report is polled before the next step).
"""
import math
import os
import random
import sys
import time

import jizhi

env = os.environ.get
t = jizhi.Trial()
B_SIMPLE = float(env("B_SIMPLE", "1000"))
ALPHA = float(env("ALPHA", "0.002"))
BETA = float(env("BETA", "2e-5"))
STEPS = int(env("STEPS", "400"))
LOG = int(env("LOG", "10"))
EPOCH_STEPS = int(env("EPOCH_STEPS", "50"))
N = float(env("N", "10000"))
D = int(env("D", "20"))
SLEEP = float(env("SLEEP", "0"))
FLUSH_EPOCH = env("FLUSH_EPOCH", "0") == "1"
rng = random.Random(int(env("SEED", str(t.trial_id if t.trial_id else 1))))

batch = int(t.param("batch_size", 32))
lr = float(t.param("lr", 0.1))
x = t.params.get("x")
if x is not None:
    quality = 1 - (float(x) - 0.3) ** 2
else:
    quality = 1 - abs(math.log10(lr / 0.1)) / 10

G = [math.sqrt(1.0 / D)] * D
VAR = [B_SIMPLE / D] * D


def sqnorms(b):
    """|G_Bs|^2 and |G_Bb|^2 with B_s = b//2 inside B_b = b."""
    bs = max(1, b // 2)
    gs = gb = 0.0
    for k in range(D):
        ms = G[k] + math.sqrt(VAR[k] / bs) * rng.gauss(0, 1)
        mr = G[k] + math.sqrt(VAR[k] / (b - bs)) * rng.gauss(0, 1)
        mb = (bs * ms + (b - bs) * mr) / b
        gs += ms * ms
        gb += mb * mb
    return gs, gb, bs


useful = 0.0
examples = 0.0
step = 0
while step < STEPS:
    for ins in t.poll():
        if ins.kind == "set" and ins.name == "batch_size":
            batch = int(ins.value)
        elif ins.kind == "set" and ins.name == "lr":
            lr = float(ins.value)
        elif ins.kind == "set":
            t.ack(ins, False, f"unknown parameter {ins.name}")
        elif ins.kind == "stop":
            t.close()
            sys.exit(0)
    step += 1
    examples += batch
    useful += batch * B_SIMPLE / (B_SIMPLE + batch)
    if SLEEP:
        time.sleep(SLEEP)
    if step % LOG == 0:
        gs, gb, bs = sqnorms(batch)
        t.report(step, train_loss=1.0 / (1 + useful / 1000), lr=lr, batch_size=batch,
                 samples_per_s=batch / (ALPHA + BETA * batch), grad_sqnorm_small=gs,
                 grad_sqnorm_big=gb, batch_small=bs, batch_big=batch)
    if step % EPOCH_STEPS == 0:
        t.report(step, val_acc=quality * useful / (useful + N), epoch=examples / N)
        if FLUSH_EPOCH and not t.flush():
            sys.exit("gns_trial: the epoch's report was not acknowledged")
if step % EPOCH_STEPS:
    t.report(step, val_acc=quality * useful / (useful + N), epoch=examples / N)
t.close()
