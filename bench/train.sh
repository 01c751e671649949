#!/usr/bin/env bash
# train.sh - `make bench-train`: jizhi-train against PyTorch (Debian's
# python3-torch) on the same machine in the same run.
#
# 1. Throughput: MLP 784-256-256-10 on Fashion-MNIST, fp32, SGD+momentum,
#    all cores (and one thread), batch 128 and 1024: samples/s of both and the ratio. The
#    two sides run in pairs, REPEATS pairs, alternating (ours then PyTorch);
#    each pair gives a ratio and the table shows the median pair's samples/s,
#    the median ratio and the range of the ratios (the machine may be
#    shared: a wide range says it was busy; the load average is printed
#    before and after). Then the residual CNN (channels 8,16) in fp32 at
#    batch 32, 128, 512 and 1024 on one thread and on all cores, and in bf16
#    (jizhi-train --precision bf16 against PyTorch's bf16 autocast) at batch
#    128 and 1024; the line before the CNN tables names the convolution
#    kernels jizhi-train runs. The MLP also in bf16: jizhi-train --precision
#    bf16 (real bf16 on oneDNN's inner products where the build has it; the
#    line before the table names the kernels) against PyTorch's bf16
#    autocast (torch.autocast("cpu", dtype=torch.bfloat16): its Linear runs
#    in bf16), then the same jizhi-train bf16 runs against PyTorch fp32.
#    Threads, the same on both sides: jizhi-train --threads N and PyTorch's
#    torch.set_num_threads(N), both started under taskset on the same first
#    N CPUs this shell may use, with OMP_NUM_THREADS=N and OMP_WAIT_POLICY
#    (passive unless set: idle OpenMP threads sleep instead of spinning on
#    a core the other threads need; jizhi-train's own default) for both.
# 2. Large batch (jizhi-train only): test accuracy after EPOCHS epochs for
#    batch 128 SGD; batch 8192 SGD with linear lr scaling and warmup;
#    batch 8192 SGD with sqrt lr scaling (for context); batch 8192 LARS with
#    warmup and polynomial decay, at lr 20 trust 0.001 and at lr 0.5 trust
#    0.04 (the same step for weights; biases and BN step at lr itself).
#
# Environment: BUILD (build), PYTHON (/usr/bin/python3), REPEATS (3),
# STEPS_SAMPLES (samples per timed MLP run, 200000), CNN_SAMPLES (per CNN run,
# 16384), CNN_BATCHES ("32 128 512 1024"), BF16_BATCHES ("128 1024"), EPOCHS (20),
# SKIP_TABLE=1, SKIP_SPEED=1, SKIP_MLP=1 (the CNN tables only), SKIP_CNN=1 (the
# MLP tables only), MATMUL (jizhi-train --matmul: auto, dnnl, blas), OMP_WAIT_POLICY,
# PAIRS=1 (every pair's figures under its row). Each row also gives samples per
# process CPU-second (every thread) of both sides and their ratio. The spans
# differ: jizhi-train's is its training steps only (step_cpu_s: no
# reports or control polling), PyTorch's the whole timed loop (with its
# per-epoch shuffle), so that ratio leans slightly jizhi's way; the
# samples/s ratio (wall time of each side's training loop: jizhi's
# samples_per_s leaves its end-of-epoch validation and live control out,
# as PyTorch's loop has neither) is the one the goals are judged by.
# The CNN tables of docs/bench.md, about 10 minutes on 2 cores:
#   SKIP_MLP=1 SKIP_TABLE=1 CNN_BATCHES="128 256" BF16_BATCHES="128 256" make bench-train
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
REPEATS=${REPEATS:-3}
SAMPLES=${STEPS_SAMPLES:-200000}
CNN_SAMPLES=${CNN_SAMPLES:-16384}
EPOCHS=${EPOCHS:-20}
TRAIN=$BUILD/bin/jizhi-train
CORES=$(nproc)
WAIT=${OMP_WAIT_POLICY:-passive}
# the first N CPUs this shell may use, as taskset takes them
cpus() { "$PYTHON" -c 'import os,sys; print(",".join(map(str, sorted(os.sched_getaffinity(0))[:int(sys.argv[1])])))' "$1"; }
# runs a command with N threads on the same N CPUs, the same way for both sides
pin() { # threads command...
    local th=$1; shift
    OMP_NUM_THREADS=$th OMP_WAIT_POLICY=$WAIT taskset -c "$(cpus "$th")" "$@"
}
[ -x "$TRAIN" ] || { echo "bench-train: build $TRAIN first (make)"; exit 1; }
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
    echo "bench-train: PyTorch is not importable by $PYTHON (install python3-torch)"; exit 1
fi
TORCHV=$("$PYTHON" -c 'import torch; print(torch.__version__)')

# The model both sides train (flags common to jizhi-train and bench_train_torch.py).
MODEL=(--model mlp --hidden 256,256)
PREC=fp32

# samples/s of one jizhi-train run: the median of its periodic reports
# (the first report, which includes start-up, is dropped), then samples per
# process CPU-second (every thread): the batch over the median step_cpu_s of
# the same reports, which a neighbour's load on a shared machine distorts
# much less than wall time.
ours() { # batch steps threads
    local b=$1 steps=$2 th=$3 every=$(( $2 / 6 > 0 ? $2 / 6 : 1 ))
    pin "$th" env -u JIZHI_TRIAL -u JIZHI_PARAMS "$TRAIN" --batch-size "$b" "${MODEL[@]}" --precision "$PREC" --matmul "${MATMUL:-auto}" --max-steps "$steps" --epochs 1000 \
        --log-every "$every" --threads "$th" --quiet 2>&1 |
        awk -v b="$b" '
            function med(a, n,   i, j, t) {
                if (!n) return 0
                for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) {t = a[j]; a[j] = a[j-1]; a[j-1] = t}
                return a[int((n + 1) / 2)]}
            /^jizhi: step [0-9]* samples_per_s=/ {if (ns++) s[ns-1] = substr($4, 15) + 0}
            /^jizhi: step [0-9]* step_cpu_s=/ {if (nc++) c[nc-1] = substr($4, 12) + 0}
            END {m = med(c, nc - 1); printf "%s %s\n", med(s, ns - 1), (m > 0 ? b / m : 0)}'
}

peer() { # batch steps threads
    pin "$3" "$PYTHON" bench/bench_train_torch.py --batch-size "$1" "${MODEL[@]}" --precision "${PEER_PREC:-$PREC}" --steps "$2" \
        --warmup-steps "$(( $2 / 10 > 20 ? 20 : $2 / 10 + 1 ))" --threads "$3" |
        "$PYTHON" -c 'import json,sys; r = json.load(sys.stdin); print(r["samples_per_s"], r.get("samples_per_cpu_s", 0))'
}

# One table row per batch: REPEATS pairs (ours, then PyTorch), a ratio per
# pair; the row shows the pair with the median ratio, the median ratio and
# the lowest and highest; then the same for samples per CPU-second (the
# median of the pairs' CPU ratios and its pair's figures). PAIRS=1 prints
# every pair's four figures under the row (whose run moved).
compare() { # threads samples batches...
    local th=$1 samples=$2; shift 2
    for b in "$@"; do
        local steps=$(( samples / b > 12 ? samples / b : 12 )) rows=()
        for _ in $(seq "$REPEATS"); do
            local o p
            o=$(ours "$b" "$steps" "$th")
            p=$(peer "$b" "$steps" "$th")
            rows+=("$(awk -v a="$o" -v b="$p" 'BEGIN {split(a, x, " "); split(b, y, " ");
                printf "%.4f %.1f %.1f %.4f %.1f %.1f", (y[1] > 0 ? x[1] / y[1] : 0), x[1], y[1],
                       (y[2] > 0 ? x[2] / y[2] : 0), x[2], y[2]}')")
        done
        printf '%s\n' "${rows[@]}" | awk -v th="$th" -v b="$b" -v pairs="${PAIRS:-0}" '
            function order(k, idx, n,   i, j, t) {
                for (i = 1; i <= n; i++) idx[i] = i
                for (i = 2; i <= n; i++) for (j = i; j > 1 && v[idx[j-1], k] > v[idx[j], k]; j--) {t = idx[j]; idx[j] = idx[j-1]; idx[j-1] = t}}
            {for (k = 1; k <= 6; k++) v[NR, k] = $k}
            END {order(1, w, NR); order(4, c, NR); m = int((NR + 1) / 2)
                 printf "%-8s %-8s %12.0f %12.0f %7.2fx %10s %11.0f %11.0f %7.2fx %10s\n", th, b,
                        v[w[m], 2], v[w[m], 3], v[w[m], 1], sprintf("%.2f-%.2f", v[w[1], 1], v[w[NR], 1]),
                        v[c[m], 5], v[c[m], 6], v[c[m], 4], sprintf("%.2f-%.2f", v[c[1], 4], v[c[NR], 4])
                 if (pairs == 1) for (i = 1; i <= NR; i++)
                     printf "           pair %d: samples/s %.0f %.0f (%.2fx), per CPU-s %.0f %.0f (%.2fx)\n",
                            i, v[i, 2], v[i, 3], v[i, 1], v[i, 5], v[i, 6], v[i, 4]}'
    done
}
header() {
    printf '%-8s %-8s %12s %12s %8s %10s %11s %11s %8s %10s\n' threads batch jizhi/s pytorch/s ratio range \
        jizhi/cpu-s torch/cpu-s ratio range
}
load() { cut -d' ' -f1-3 /proc/loadavg; }

if [ "${SKIP_SPEED:-0}" != 1 ]; then
echo "   threads: the same on both sides, pinned (taskset) to the same CPUs, OMP_WAIT_POLICY=$WAIT"
# The MLP's rows: all cores (the goal), then one thread (less sensitive to
# a busy machine), batch 128 and 1024.
mlp_table() {
    header
    for th in $(printf '%s\n' "$CORES" 1 | uniq); do
        compare "$th" "$SAMPLES" 128 1024
    done
}
if [ "${SKIP_MLP:-0}" != 1 ]; then
echo "== jizhi-train vs PyTorch $TORCHV: MLP 784-256-256-10, Fashion-MNIST, fp32, SGD"
echo "   (median of $REPEATS alternating pairs of $SAMPLES samples; load average: $(load))"
mlp_table
echo "   goal: >= 1.2x at batch 128, >= 1.0x at batch 1024 (load average after: $(load))"
echo
echo "== bf16: jizhi-train --precision bf16 vs PyTorch $TORCHV bf16 autocast, MLP 784-256-256-10"
env -u JIZHI_TRIAL -u JIZHI_PARAMS "$TRAIN" "${MODEL[@]}" --precision bf16 --matmul "${MATMUL:-auto}" \
    --verbose --max-steps 1 --train-subset 256 --val-size 64 --quiet 2>&1 |
    sed -n 's/^jizhi-train: linears: /   linears: /p'
echo "   (median of $REPEATS alternating pairs of $SAMPLES samples; load average: $(load))"
PREC=bf16
mlp_table
echo
echo "== the same jizhi-train bf16 vs PyTorch $TORCHV fp32 (load average: $(load))"
PEER_PREC=fp32
mlp_table
unset PEER_PREC
PREC=fp32
echo "   goal (issue 38): the MLP >= 2x PyTorch (load average after: $(load))"
echo
fi
if [ "${SKIP_CNN:-0}" != 1 ]; then
MODEL=(--model cnn --channels 8,16)
read -r -a CNN_B <<<"${CNN_BATCHES:-32 128 512 1024}"
read -r -a BF16_B <<<"${BF16_BATCHES:-128 1024}"
echo "== jizhi-train vs PyTorch $TORCHV: residual CNN (channels 8,16), fp32"
env -u JIZHI_TRIAL -u JIZHI_PARAMS "$TRAIN" "${MODEL[@]}" --verbose --max-steps 1 --train-subset 256 \
    --val-size 64 --quiet 2>&1 | sed -n 's/^jizhi-train: convolutions: /   convolutions: /p'
echo "   (median of $REPEATS alternating pairs of $CNN_SAMPLES samples; load average: $(load))"
header
for th in 1 $([ "$CORES" -gt 1 ] && echo "$CORES"); do
    compare "$th" "$CNN_SAMPLES" "${CNN_B[@]}"
done
echo "   goal: >= 1.0x at every batch on 1 and all threads (load average after: $(load))"
echo
echo "== bf16: jizhi-train --precision bf16 vs PyTorch $TORCHV bf16 autocast, residual CNN (channels 8,16)"
echo "   (median of $REPEATS alternating pairs of $CNN_SAMPLES samples; load average: $(load))"
PREC=bf16
header
for th in 1 $([ "$CORES" -gt 1 ] && echo "$CORES"); do
    compare "$th" "$CNN_SAMPLES" "${BF16_B[@]}"
done
PREC=fp32
echo "   goal: >= 1.0x, and jizhi-train bf16 above its fp32 at the same batch and threads (load average after: $(load))"
fi
fi

[ "${SKIP_TABLE:-0}" = 1 ] && exit 0
echo
echo "== large batch: MLP 784-256-256-10, Fashion-MNIST, $EPOCHS epochs, test accuracy"
row() { # label, flags...
    local label=$1; shift
    local t0; t0=$(date +%s)
    local acc
    acc=$(env -u JIZHI_TRIAL -u JIZHI_PARAMS "$TRAIN" --hidden 256,256 --epochs "$EPOCHS" --threads "$CORES" \
          --log-every 100000 --quiet "$@" 2>&1 | sed -n 's/^jizhi: step [0-9]* test_acc=//p' | tail -1)
    printf '%-46s %8.4f %7.0fs\n' "$label" "${acc:-0}" "$(( $(date +%s) - t0 ))"
}
printf '%-46s %8s %8s\n' run test_acc time
row "batch 128   SGD lr 0.05, poly decay" \
    --batch-size 128 --optimizer sgd --lr 0.05 --schedule poly
row "batch 8192  SGD lr 0.05x64 (linear), warmup 5" \
    --batch-size 8192 --optimizer sgd --lr 0.05 --lr-scaling linear --base-batch 128 \
    --warmup-epochs 5 --schedule poly
row "batch 8192  SGD lr 0.05x8 (sqrt), warmup 5" \
    --batch-size 8192 --optimizer sgd --lr 0.05 --lr-scaling sqrt --base-batch 128 \
    --warmup-epochs 5 --schedule poly
row "batch 8192  LARS lr ${LARS_LR:-20}, warmup 5, poly power 1" \
    --batch-size 8192 --optimizer lars --lr "${LARS_LR:-20}" --warmup-epochs 5 --schedule poly \
    --poly-power 1
row "batch 8192  LARS 0.5 trust 0.04 wu ${LARS_WARMUP:-5}" \
    --batch-size 8192 --optimizer lars --lr 0.5 --trust 0.04 --warmup-epochs "${LARS_WARMUP:-5}" \
    --schedule poly --poly-power 1
echo "   goal: LARS at 8192 within 2 points of batch 128; SGD at 8192 well short"
echo "   (issue 38's 1 point against batch 256 was met with the last row's settings at"
echo "   EPOCHS=60 LARS_WARMUP=10: docs/bench.md, \"LARS at batch 8192 on Fashion-MNIST (CPU)\")"
