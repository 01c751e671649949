#!/usr/bin/python3
"""bench_train_torch.py - the PyTorch peer of jizhi-train for `make bench-train`
and scripts/gpu-check.sh.

Trains the same MLP (784-H-...-10, ReLU, cross-entropy), or with --model cnn
the same residual CNN (conv-BN-ReLU stem, per stage a stride-2 transition
after the first and one residual block, global average pool, linear), on Fashion-MNIST
with the same normalisation and SGD/LARS settings, in the simplest fast
PyTorch loop (tensors in memory, a random permutation per epoch, no
DataLoader), and prints one JSON line: samples/s over the timed steps,
final validation/test accuracy.

    bench_train_torch.py --batch-size 128 --steps 300            # throughput
    bench_train_torch.py --batch-size 8192 --epochs 20 --optimizer lars ...
"""
import argparse, gzip, json, math, os, struct, time

import numpy as np
import torch

MEAN, STD = 0.2860, 0.3530


def load_idx(images, labels):
    with gzip.open(images, "rb") as f:
        magic, n, h, w = struct.unpack(">IIII", f.read(16))
        assert magic == 0x803, images
        x = np.frombuffer(f.read(n * h * w), dtype=np.uint8).reshape(n, h * w)
    with gzip.open(labels, "rb") as f:
        magic, n2 = struct.unpack(">II", f.read(8))
        assert magic == 0x801 and n2 == n, labels
        y = np.frombuffer(f.read(n), dtype=np.uint8)
    x = (x.astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


class LARS(torch.optim.Optimizer):
    """LARS as in jizhi-train: local lr = trust*|w|/(|g| + wd*|w|) for
    weights; biases get plain momentum SGD without decay."""

    def __init__(self, params, lr, momentum, weight_decay, trust=0.001):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust=trust))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "v" not in st:
                    st["v"] = torch.zeros_like(p)
                d = p.grad
                if p.dim() > 1:
                    wn, gn = p.norm(), d.norm()
                    local = torch.where((wn > 0) & (gn > 0),
                                        g["trust"] * wn / (gn + g["weight_decay"] * wn),
                                        torch.ones_like(wn))
                    d = (d + g["weight_decay"] * p) * (g["lr"] * local)
                else:
                    d = d * g["lr"]
                st["v"].mul_(g["momentum"]).add_(d)
                p.sub_(st["v"])


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        bound = math.sqrt((1.0 if last else 6.0) / sizes[i])  # same init as jizhi-train
        torch.nn.init.uniform_(lin.weight, -bound, bound)
        torch.nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def cbr(ci, co, stride, relu=True, zero_gamma=False):
    bn = torch.nn.BatchNorm2d(co)
    if zero_gamma:
        torch.nn.init.zeros_(bn.weight)
    layers = [torch.nn.Conv2d(ci, co, 3, stride, 1, bias=False), bn]
    return torch.nn.Sequential(*(layers + [torch.nn.ReLU()] if relu else layers))


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a, self.b = cbr(c, c, 1), cbr(c, c, 1, relu=False, zero_gamma=True)

    def forward(self, x):
        return torch.relu(self.b(self.a(x)) + x)


class Images(torch.nn.Module):
    channels_last = False  # --channels-last: NHWC activations (one channel: the same bytes)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


def cnn(channels):
    layers, c = [Images(), cbr(1, channels[0], 1)], channels[0]
    for i, co in enumerate(channels):
        if i:
            layers.append(cbr(c, co, 2))
            c = co
        layers.append(Block(c))
    return torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(c, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--channels", default="16,32", help="cnn: channels per stage")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (throughput mode)")
    ap.add_argument("--warmup-steps", type=int, default=20)
    ap.add_argument("--epochs", type=float, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "lars"])
    ap.add_argument("--warmup-epochs", type=float, default=0)
    ap.add_argument("--schedule", default="constant", choices=["constant", "cosine", "poly"])
    ap.add_argument("--poly-power", type=float, default=2)
    ap.add_argument("--train-subset", type=int, default=0)
    ap.add_argument("--val-size", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                    help="autocast mixed precision (CUDA)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--channels-last", action="store_true",
                    help="cnn: weights and activations in channels_last (NHWC)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    # fp32 means fp32: PyTorch's default runs cuDNN's fp32 convolutions on
    # TF32 tensor cores (torch.backends.cudnn.allow_tf32 = True), where
    # jizhi-train's CUDA CNN asks cuDNN for plain fp32 (and its matmuls'
    # default is already fp32); the state is in the JSON
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    x, y = load_idx(f"{a.data_dir}/train-images-idx3-ubyte.gz", f"{a.data_dir}/train-labels-idx1-ubyte.gz")
    xt, yt = load_idx(f"{a.data_dir}/t10k-images-idx3-ubyte.gz", f"{a.data_dir}/t10k-labels-idx1-ubyte.gz")
    g = torch.Generator().manual_seed(12345)
    perm = torch.randperm(x.shape[0], generator=g)
    xv, yv = x[perm[-a.val_size:]], y[perm[-a.val_size:]]
    keep = perm[:-a.val_size].sort().values
    x, y = x[keep], y[keep]
    if a.train_subset:
        x, y = x[: a.train_subset], y[: a.train_subset]
    x, y, xv, yv, xt, yt = (t.to(dev) for t in (x, y, xv, yv, xt, yt))

    if a.model == "cnn":
        model = cnn([int(s) for s in a.channels.split(",") if s]).to(dev)
        if a.channels_last:
            Images.channels_last = True
            model = model.to(memory_format=torch.channels_last)
    else:
        model = mlp([784] + [int(s) for s in a.hidden.split(",") if s] + [10]).to(dev)
    decay = [p for p in model.parameters() if p.dim() > 1]
    nodecay = [p for p in model.parameters() if p.dim() <= 1]
    if a.optimizer == "lars":
        opt = LARS([{"params": decay}, {"params": nodecay, "weight_decay": 0.0}],
                   lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    else:
        opt = torch.optim.SGD([{"params": decay, "weight_decay": a.weight_decay},
                               {"params": nodecay, "weight_decay": 0.0}],
                              lr=a.lr, momentum=a.momentum)
    base_lrs = [g["lr"] for g in opt.param_groups]
    lossf = torch.nn.CrossEntropyLoss()
    n = x.shape[0]
    B = a.batch_size
    steps_per_epoch = math.ceil(n / B)
    total = a.steps + a.warmup_steps if a.steps else int(round(a.epochs * steps_per_epoch))

    def factor(progress):
        if a.warmup_epochs > 0 and progress < a.warmup_epochs:
            return progress / a.warmup_epochs
        span = a.epochs - a.warmup_epochs
        p = min(max((progress - a.warmup_epochs) / span, 0.0), 1.0) if span > 0 else 1.0
        if a.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * p))
        if a.schedule == "poly":
            return (1 - p) ** a.poly_power
        return 1.0

    amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    scaler = torch.cuda.amp.GradScaler() if a.precision == "fp16" and dev.type == "cuda" else None
    step, epoch, pos = 0, 0, 0
    order = torch.randperm(n, device=dev)
    t0 = None
    timed = 0
    while step < total:
        if step == a.warmup_steps and a.steps:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0, timed, c0 = time.perf_counter(), 0, time.process_time()
        idx = order[pos: pos + B]
        nb = idx.shape[0]
        prog = epoch + (pos + nb) / n
        if not a.steps:
            for gr, bl in zip(opt.param_groups, base_lrs):
                gr["lr"] = bl * factor(prog)
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            out = model(x[idx])
            loss = lossf(out.float(), y[idx])
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        step += 1
        timed += nb
        pos += nb
        if pos >= n:
            epoch, pos = epoch + 1, 0
            order = torch.randperm(n, device=dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0 if t0 is not None else 0.0
    dc = time.process_time() - c0 if t0 is not None else 0.0

    @torch.no_grad()
    def acc(xx, yy):
        return (model(xx).argmax(1) == yy).float().mean().item()

    res = {"peer": "pytorch " + torch.__version__, "batch_size": B, "steps": step,
           "threads": torch.get_num_threads(), "precision": a.precision,
           "device": str(dev), "tf32": torch.backends.cudnn.allow_tf32,
           "final_loss": loss.item(),
           "val_acc": acc(xv, yv), "test_acc": acc(xt, yt)}
    if a.steps:
        res["samples_per_s"] = timed / dt if dt > 0 else 0.0
        # per process CPU-second (every thread): what a busy machine cannot
        # distort as much as wall time (jizhi-train's step_cpu_s is the same)
        res["samples_per_cpu_s"] = timed / dc if dc > 0 else 0.0
    print(json.dumps(res))


if __name__ == "__main__":
    main()
