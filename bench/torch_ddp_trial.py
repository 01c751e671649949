"""bench-torch's 2-rank trial: examples/torch's CNN under DDP on gloo, its
ranks started here as torchrun would (rank 1 without a trial identity, as
libjizhi runs on ranks other than 0). Each rank appends "lr wall-time step"
to $LOG.<rank> when its optimizer's lr changes, so the bench sees when a
`trial set lr` reached both optimizers; rank 0 also appends "value
wall-time" to $LOG.poll when it takes an instruction from the helper (the
bench's split of the latency)."""
import gc
import os
import socket
import subprocess
import sys
import time

if "RANK" not in os.environ:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if r:
            for k in ("JIZHI_TRIAL", "JIZHI_TOKEN", "JIZHI_ENDPOINT"):
                env.pop(k, None)
        procs.append(subprocess.Popen([sys.executable, __file__], env=env))
    sys.exit(max(abs(p.wait()) for p in procs))  # a rank killed by a signal too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "examples", "torch"))
from train import Net, fashion_mnist  # noqa: E402
import jizhi  # noqa: E402
import jizhi.torch  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo")
rank = dist.get_rank()
t = jizhi.Trial()
net = nn.parallel.DistributedDataParallel(Net(8))
opt = torch.optim.SGD(net.parameters(), lr=t.param("lr", 0.01), momentum=0.9)
# LOOK (bench-torch --look): "default" (attach's own choice: the flag on
# DDP's gradient all-reduce), "cadence" (grad_flag=False: a look every
# SYNC_MS of training, 0 every step)
look = os.environ.get("LOOK", "default")
ctl = jizhi.torch.attach(t, opt, model=net, sync_ms=float(os.environ.get("SYNC_MS", "10")),
                         **({"grad_flag": False} if look == "cadence" else {}))
print("jizhi.torch looks by %s" % ctl.looks_by, file=sys.stderr)
if rank == 0:
    polled = open(os.environ["LOG"] + ".poll", "a")
    _next = ctl._next

    def _traced():
        r = _next()
        msg = r[0] if isinstance(r, tuple) else r  # (msg, ins); msg alone before the sync box
        if msg is not None:
            polled.write("%r %.6f %d\n" % (msg.get("value"), time.time(), ctl.global_step))
            polled.flush()
        return r

    ctl._next = _traced
log = open("%s.%d" % (os.environ["LOG"], rank), "a")
last = None
for x, y in ctl.loader(fashion_mnist("train", 4096), batch_size=32, shuffle=True, epochs=10000):
    opt.zero_grad()
    F.cross_entropy(net(x), y).backward()
    opt.step()
    ok = ctl.step()
    lr = opt.param_groups[0]["lr"]
    if lr != last:
        log.write("%r %.6f %d\n" % (lr, time.time(), ctl.global_step))
        log.flush()
        last = lr
    if not ok:
        break
t.close()
# the DDP model (its reducer holds the process group) goes before the
# group, so no gloo thread outlives it into the interpreter's exit
del ctl, opt, net
gc.collect()
dist.destroy_process_group()
