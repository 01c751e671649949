"""One rank of a DDP trial (trial.launcher "torch"): joins the gloo group
from the environment the dispatcher set (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), sums RANK+1 over the ranks with all_reduce, prints one JSON
line with the sum and its environment, and on rank 0 reports score=<sum>
with the `jizhi` command given as argv[1]."""
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "JIZHI_RANK", "JIZHI_RANKS", "JIZHI_TRIAL", "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES")

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(json.dumps({"rank": rank, "world": dist.get_world_size(), "sum": t.item(),
                  "env": {k: os.environ.get(k) for k in KEYS}}), flush=True)
if rank == 0:
    subprocess.run([sys.argv[1], "report", "score=%g" % t.item()], check=True)
dist.barrier()
dist.destroy_process_group()
