#!/usr/bin/env python3
"""The alpha-beta model of data-parallel scaling: how much of a step's time
the gradient all-reduce adds at P GPUs, fed with a step time measured on one
GPU (issue 38, item 5).

A ring all-reduce of S bytes over P ranks takes 2(P-1) alpha + 2(P-1)/P S
beta: 2(P-1) messages of alpha each, and every rank sends and receives
2(P-1)/P S bytes at 1/beta bytes/s. With G GPUs a node:
- flat ring: one ring over all P GPUs, at the slower link's rate once P > G;
- hierarchical: a ring inside each node (reduce, then broadcast back), and
  a ring over the N = P/G node leaders on the link between nodes;
- hierarchical + top-k 1 % (comm.py's curves; jizhi's top-k runs on the CPU
  path only): the leaders all-gather k = 1 % of the values with their int32
  indices, (N-1) (alpha + 8k/B_out).
Weak scaling: every GPU keeps its batch b, so the step's compute t_c is what
one GPU measured at b, and the global batch is P b. A batch larger than the
training set (--train-size) is an epoch a step: t_c = train-size / samples/s. Efficiency without
overlap is t_c / (t_c + T); with the all-reduce overlapped with the
backward (t_b of t_c), t_c / (t_c - t_b + max(t_b, T)).

What one GPU measures: t_c at each batch (gpu-check.sh's speed rows, as
samples/s) and the gradient's size (jizhi-train --verbose's "model:" line).
What it cannot: the links (alpha, the bandwidths inside and between nodes)
and the backward's share of the step, which are stated as assumptions
(flags) and printed with every table.

    bench/scaling_model.py --gpu-check build/gpu-check.json --model mlp \\
        --grad-bytes 1077288 --wire-bytes 2 [--precision bf16] [--json FILE]
    bench/scaling_model.py --measured 128:350000,1024:900000 --grad-bytes 1077288

Errors (exit 2): a JSON that is not gpu-check's or a CPU stand-in's, no
speed row measured for that model and precision, a value out of range, a
--gpus-per-node that does not divide the GPU counts above it.
"""
import argparse
import json
import sys

GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)


class Bad(Exception):
    """A user error: printed, exit status 2."""


def ring(P, S, alpha, beta):
    """Seconds for a ring all-reduce of S bytes over P ranks."""
    return 2 * (P - 1) * alpha + 2 * (P - 1) / P * S * beta if P > 1 else 0.0


def comm_times(P, S, alpha, b_in, b_out, G, topk_bytes=None):
    """{scheme: seconds} of one all-reduce of S bytes at P GPUs, G a node."""
    flat = ring(P, S, alpha, 1 / (b_out if P > G else b_in))
    N = P // G
    intra = ring(min(P, G), S, alpha, 1 / b_in)  # reduce to the leader + broadcast: a ring's cost
    t = {"flat ring": flat,
         "hierarchical": flat if N <= 1 else intra + ring(N, S, alpha, 1 / b_out)}
    if topk_bytes is not None:
        t["hierarchical + top-k 1%"] = flat if N <= 1 else intra + (N - 1) * (
            alpha + topk_bytes / b_out)
    return t


def project(t_c, t_b, S, alpha, b_in, b_out, G, counts=GPU_COUNTS, topk_bytes=None):
    """Rows {gpus, scheme, comm_s, eff, eff_overlap} for a step of t_c seconds
    (backward t_b) exchanging S bytes."""
    rows = []
    for P in counts:
        for scheme, T in comm_times(P, S, alpha, b_in, b_out, G, topk_bytes).items():
            rows.append({"gpus": P, "scheme": scheme, "comm_s": T,
                         "eff": t_c / (t_c + T),
                         "eff_overlap": t_c / (t_c - t_b + max(t_b, T))})
    return rows


def print_table(rows, indent="  "):
    """One line per GPU count, a column of comm ms / efficiency / with overlap per scheme."""
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    head = " | ".join(f"{s:>22}" for s in schemes)
    print(f"{indent}{'GPUs':>5} | {head}")
    print(f"{indent}{'':>5} | " + " | ".join(f"{'comm ms  eff  eff+ovl':>22}" for _ in schemes))
    for P in dict.fromkeys(r["gpus"] for r in rows):
        cells = [f"{r['comm_s'] * 1e3:8.2f} {r['eff'] * 100:5.1f}% {r['eff_overlap'] * 100:6.1f}%"
                 for s in schemes for r in rows if r["gpus"] == P and r["scheme"] == s]
        print(f"{indent}{P:>5} | " + " | ".join(cells))


def load_gpu_check(path):
    """gpu-check.sh's JSON as a dict, checked for its shape (also scripts/gpu-table.py's)."""
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except OSError as e:
        raise Bad(f"{path}: cannot read: {e.strerror}")
    except ValueError as e:
        raise Bad(f"{path}: not JSON: {e}")
    if not isinstance(run, dict) or "mode" not in run or not isinstance(run.get("checks"), list):
        raise Bad(f"{path}: not a gpu-check.sh result (no 'mode' and 'checks')")
    for key in ("speed_mlp", "speed_cnn"):
        if not isinstance(run.get(key, []), list):
            raise Bad(f"{path}: '{key}' is not a list")
        for r in run.get(key) or []:
            if not isinstance(r, dict) or not isinstance(r.get("batch"), int) or "precision" not in r:
                raise Bad(f"{path}: a row of '{key}' has no batch and precision: {r!r}")
    return run


def measured_from_gpu_check(path, model, precision):
    """[(batch, samples/s)] of jizhi-train-cuda's measured rows of that model and precision."""
    run = load_gpu_check(path)
    if run["mode"] != "gpu":
        raise Bad(f"{path}: mode '{run['mode']}': a CPU stand-in measured no GPU step")
    out = [(r["batch"], r["jizhi_cuda"]) for r in run.get("speed_" + model) or []
           if r["precision"] == precision and isinstance(r.get("jizhi_cuda"), (int, float))
           and r["jizhi_cuda"] > 0]
    if not out:
        raise Bad(f"{path}: no measured {model} {precision} row of jizhi-train-cuda")
    return sorted(out)


def parse_measured(text):
    """[(batch, samples/s)] from "B:SPS,B:SPS"."""
    out = []
    for item in filter(None, text.split(",")):
        try:
            b, sps = item.split(":")
            b, sps = int(b), float(sps)
        except ValueError:
            raise Bad(f"--measured: '{item}' is not BATCH:SAMPLES_PER_S")
        if b <= 0 or not sps > 0:
            raise Bad(f"--measured: '{item}': the batch and the samples/s must be > 0")
        out.append((b, sps))
    if not out:
        raise Bad("--measured: no BATCH:SAMPLES_PER_S pair")
    return sorted(out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--gpu-check", help="gpu-check.sh's JSON: t_c from its speed rows")
    src.add_argument("--measured", help="B:SPS,...: samples/s one GPU measured at batch B")
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp", help="--gpu-check's rows")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="bf16")
    p.add_argument("--train-size", type=int, default=55000,
                   help="examples in the training set: a larger batch's step takes them all "
                        "(jizhi-train on Fashion-MNIST's default split: 55 000)")
    p.add_argument("--label", default="", help="a name for the tables (the model)")
    p.add_argument("--grad-bytes", type=float, required=True,
                   help="bytes of fp32 gradients (jizhi-train --verbose's model: line)")
    p.add_argument("--wire-bytes", type=int, choices=(2, 4), default=4,
                   help="bytes a value on the wire (4: fp32, jizhi-train's default --wire; "
                        "2: --wire bf16/fp16)")
    p.add_argument("--backward-share", type=float, default=2 / 3,
                   help="assumed: the backward's share of the step (what overlap can hide behind)")
    p.add_argument("--alpha-us", type=float, default=5.0, help="assumed: a message's latency, us")
    p.add_argument("--intra-gbs", type=float, default=150.0,
                   help="assumed: a GPU's all-reduce bandwidth inside a node, GB/s")
    p.add_argument("--inter-gbps", type=float, default=100.0,
                   help="assumed: a node's link to the others, Gb/s")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args(argv)
    try:
        for name in ("grad_bytes", "alpha_us", "intra_gbs", "inter_gbps", "gpus_per_node",
                     "train_size"):
            if not getattr(a, name) > 0:
                raise Bad(f"--{name.replace('_', '-')} must be > 0")
        G = a.gpus_per_node
        if any(P > G and P % G for P in GPU_COUNTS):
            raise Bad(f"--gpus-per-node {G}: it must divide every GPU count above it "
                      f"({', '.join(map(str, GPU_COUNTS))}): whole nodes only")
        if not 0 <= a.backward_share <= 1:
            raise Bad("--backward-share must be in [0, 1]")
        if a.gpu_check:
            pairs = measured_from_gpu_check(a.gpu_check, a.model, a.precision)
            what = f"jizhi-train-cuda {a.model} {a.precision}, measured ({a.gpu_check})"
        else:
            pairs = parse_measured(a.measured)
            what = "the samples/s given"
        what = f"{a.label}: {what}" if a.label else what
        # a step takes the batch, or the whole set when the batch is larger
        # (samples/s counts the rows a step took)
        steps = [(b, min(b, a.train_size) / sps, sps) for b, sps in pairs]
        S = a.grad_bytes / 4 * a.wire_bytes
        alpha, b_in, b_out = a.alpha_us * 1e-6, a.intra_gbs * 1e9, a.inter_gbps * 1e9 / 8
        print(f"scaling model (alpha-beta, weak scaling) for {what}: {S / 1e6:.3f} MB a step on "
              f"the wire; assumed: alpha {a.alpha_us:g} us, {a.intra_gbs:g} GB/s inside a node "
              f"of {G}, {a.inter_gbps:g} Gb/s between nodes, backward "
              f"{a.backward_share:.0%} of the step")
        out = []
        for b, t_c, sps in steps:
            rows = project(t_c, a.backward_share * t_c, S, alpha, b_in, b_out, G)
            whole = f", an epoch of {a.train_size} a step" if b > a.train_size else ""
            print(f"\n  batch {b} a GPU: step {t_c * 1e3:.3f} ms ({sps:,.0f} samples/s on one "
                  f"GPU{whole})")
            print_table(rows, "    ")
            best = max((r for r in rows if r["gpus"] == GPU_COUNTS[-1]), key=lambda r: r["eff"])
            print(f"    at {GPU_COUNTS[-1]} GPUs: best without overlap {best['scheme']}, "
                  f"{best['eff']:.1%} ({best['eff'] * GPU_COUNTS[-1] * sps:,.0f} samples/s)")
            out.append({"batch": b, "step_s": t_c, "rows": rows})
        if a.json:
            try:
                with open(a.json, "w", encoding="utf-8") as f:
                    json.dump({"label": a.label, "bytes_per_allreduce": S, "alpha_s": alpha,
                               "intra_Bps": b_in, "inter_Bps": b_out, "gpus_per_node": G,
                               "backward_share": a.backward_share, "batches": out}, f, indent=1)
            except OSError as e:
                raise Bad(f"{a.json}: cannot write: {e.strerror}")
        return 0
    except Bad as e:
        print(f"scaling_model: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
