"""A small CNN on Fashion-MNIST with jizhi.torch: live lr/momentum/
weight_decay/batch_size changes, checkpoints for PBT, the guard and
`pause --release`, and DDP ranks when started with RANK/WORLD_SIZE (the
"launcher": "torch" of the spec, or torchrun). Also runs on its own:

    python3 train.py                      # standalone: defaults, reports on stderr
    python3 train.py --epochs 1 --train-subset 5000

Reads Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, or
$FMNIST_DIR). Reports train_loss/lr every --report-every steps and
val_acc/val_loss every --eval-every steps and at the end. --no-jizhi trains
the same loop without jizhi.torch (the benchmark's baseline).
"""
import argparse
import gzip
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(1, os.path.join(HERE, "..", "..", "trial_helper", "python"))  # a source tree
import jizhi  # noqa: E402
import jizhi.torch  # noqa: E402

DATA = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def fashion_mnist(split, n=None):
    pre = "train" if split == "train" else "t10k"
    x = idx(pre + "-images-idx3-ubyte.gz")
    y = idx(pre + "-labels-idx1-ubyte.gz")
    if n:
        x, y = x[:n], y[:n]
    x = (x.float() / 255.0 - 0.2860) / 0.3530
    return torch.utils.data.TensorDataset(x.unsqueeze(1), y.long())


class Net(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.c1 = nn.Conv2d(1, width, 3, padding=1)
        self.c2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.fc = nn.Linear(2 * width * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


def evaluate(model, data, ddp):
    model.eval()
    correct = total = 0
    loss = 0.0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(data, batch_size=1000):
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total, loss / total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: none)")
    ap.add_argument("--train-subset", type=int, default=12000)
    ap.add_argument("--val-size", type=int, default=2000)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--report-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-jizhi", action="store_true", help="the same loop without jizhi.torch")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if ddp:  # started as one of N ranks (RANK, WORLD_SIZE, MASTER_ADDR/PORT set)
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")

    t = jizhi.Trial()
    lr = t.param("lr", 0.05)
    bs = t.param("batch_size", 64)
    model = Net(args.width)
    net = nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=t.param("momentum", 0.9),
                          weight_decay=t.param("weight_decay", 1e-4))
    train = fashion_mnist("train", args.train_subset)
    val = fashion_mnist("test", args.val_size)

    if args.no_jizhi:
        ctl = None
        batches = (b for _ in range(args.epochs) for b in torch.utils.data.DataLoader(
            train, batch_size=bs, shuffle=True,
            generator=torch.Generator().manual_seed(args.seed)))
    else:
        ctl = jizhi.torch.attach(t, opt, model=net, report_every=args.report_every)
        batches = ctl.loader(train, batch_size=bs, shuffle=True, epochs=args.epochs,
                             seed=args.seed)
    step = ctl.global_step if ctl else 0
    t0, c0 = time.perf_counter(), time.process_time()
    done = 0
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        step += 1
        done += 1
        if ctl is not None:
            if not ctl.step(loss=loss):
                break
            step = ctl.global_step
        if step % args.eval_every == 0:
            acc, vloss = evaluate(model, val, ddp)
            if ctl is not None:
                ctl.report_eval(val_acc=acc, val_loss=vloss,
                                epoch=batches.epoch + batches.pos / len(train) * ctl.world_size)
        if args.max_steps and step >= args.max_steps:
            break
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    acc, vloss = evaluate(model, val, ddp)
    if ctl is not None:
        ctl.report_eval(val_acc=acc, val_loss=vloss,
                        epoch=batches.epoch + batches.pos / len(train) * ctl.world_size)
    else:
        t.report(step, val_acc=acc, val_loss=vloss)
    if not ddp or dist.get_rank() == 0:
        # the loop's wall time, and its CPU time (every thread of this process)
        print("steps %d in %.3f s (CPU %.3f s): %.1f steps/s, val_acc %.4f"
              % (done, elapsed, cpu, done / elapsed if elapsed else 0.0, acc), flush=True)
    t.close()
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
