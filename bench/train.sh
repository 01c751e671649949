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
#    kernels jizhi-train runs.
#    Threads, the same on both sides: jizhi-train --threads N and PyTorch's
#    torch.set_num_threads(N), both started under taskset on the same first
#    N CPUs this shell may use, with OMP_NUM_THREADS=N and OMP_WAIT_POLICY
#    (passive unless set: idle OpenMP threads sleep instead of spinning on
#    a core the other threads need; jizhi-train's own default) for both.
# 2. Large batch (jizhi-train only): test accuracy after EPOCHS epochs for
#    batch 128 SGD; batch 8192 SGD with linear lr scaling and warmup;
#    batch 8192 SGD with sqrt lr scaling (for context); batch 8192 LARS with
#    warmup and polynomial decay.
#
# Environment: BUILD (build), PYTHON (/usr/bin/python3), REPEATS (3),
# STEPS_SAMPLES (samples per timed MLP run, 200000), CNN_SAMPLES (per CNN run,
# 16384), CNN_BATCHES ("32 128 512 1024"), BF16_BATCHES ("128 1024"), EPOCHS (20),
# SKIP_TABLE=1, SKIP_SPEED=1, SKIP_MLP=1 (the CNN tables only), OMP_WAIT_POLICY.
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
# (the first report, which includes start-up, is dropped).
ours() { # batch steps threads
    local b=$1 steps=$2 th=$3 every=$(( $2 / 6 > 0 ? $2 / 6 : 1 ))
    pin "$th" env -u JIZHI_TRIAL -u JIZHI_PARAMS "$TRAIN" --batch-size "$b" "${MODEL[@]}" --precision "$PREC" --max-steps "$steps" --epochs 1000 \
        --log-every "$every" --threads "$th" --quiet 2>&1 |
        sed -n 's/^jizhi: step [0-9]* samples_per_s=//p' | tail -n +2 | sort -g |
        awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print 0}'
}

peer() { # batch steps threads
    pin "$3" "$PYTHON" bench/bench_train_torch.py --batch-size "$1" "${MODEL[@]}" --precision "$PREC" --steps "$2" \
        --warmup-steps "$(( $2 / 10 > 20 ? 20 : $2 / 10 + 1 ))" --threads "$3" |
        "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])'
}

# One table row per batch: REPEATS pairs (ours, then PyTorch), a ratio per
# pair; the row shows the pair with the median ratio, the median ratio and
# the lowest and highest.
compare() { # threads samples batches...
    local th=$1 samples=$2; shift 2
    for b in "$@"; do
        local steps=$(( samples / b > 12 ? samples / b : 12 )) rows=()
        for _ in $(seq "$REPEATS"); do
            local o p
            o=$(ours "$b" "$steps" "$th")
            p=$(peer "$b" "$steps" "$th")
            rows+=("$(awk -v a="$o" -v b="$p" 'BEGIN {printf "%.4f %.1f %.1f", (b > 0 ? a / b : 0), a, b}')")
        done
        printf '%s\n' "${rows[@]}" | sort -g | awk -v th="$th" -v b="$b" '
            {r[NR] = $1; o[NR] = $2; p[NR] = $3}
            END {m = int((NR + 1) / 2)
                 printf "%-8s %-8s %16.0f %16.0f %7.2fx  %.2f-%.2f\n", th, b, o[m], p[m], r[m], r[1], r[NR]}'
    done
}
load() { cut -d' ' -f1-3 /proc/loadavg; }

if [ "${SKIP_SPEED:-0}" != 1 ]; then
echo "   threads: the same on both sides, pinned (taskset) to the same CPUs, OMP_WAIT_POLICY=$WAIT"
if [ "${SKIP_MLP:-0}" != 1 ]; then
echo "== jizhi-train vs PyTorch $TORCHV: MLP 784-256-256-10, Fashion-MNIST, fp32, SGD"
echo "   (median of $REPEATS alternating pairs of $SAMPLES samples; load average: $(load))"
printf '%-8s %-8s %16s %16s %8s  %s\n' threads batch jizhi-train pytorch ratio range
# all cores (the goal), then one thread (less sensitive to a busy machine)
for th in $(printf '%s\n' "$CORES" 1 | uniq); do
    compare "$th" "$SAMPLES" 128 1024
done
echo "   goal: >= 1.2x at batch 128, >= 1.0x at batch 1024 (load average after: $(load))"
echo
fi
MODEL=(--model cnn --channels 8,16)
read -r -a CNN_B <<<"${CNN_BATCHES:-32 128 512 1024}"
read -r -a BF16_B <<<"${BF16_BATCHES:-128 1024}"
echo "== jizhi-train vs PyTorch $TORCHV: residual CNN (channels 8,16), fp32"
env -u JIZHI_TRIAL -u JIZHI_PARAMS "$TRAIN" "${MODEL[@]}" --verbose --max-steps 1 --train-subset 256 \
    --val-size 64 --quiet 2>&1 | sed -n 's/^jizhi-train: convolutions: /   convolutions: /p'
echo "   (median of $REPEATS alternating pairs of $CNN_SAMPLES samples; load average: $(load))"
printf '%-8s %-8s %16s %16s %8s  %s\n' threads batch jizhi-train pytorch ratio range
for th in 1 $([ "$CORES" -gt 1 ] && echo "$CORES"); do
    compare "$th" "$CNN_SAMPLES" "${CNN_B[@]}"
done
echo "   goal: >= 1.0x at every batch on 1 and all threads (load average after: $(load))"
echo
echo "== bf16: jizhi-train --precision bf16 vs PyTorch $TORCHV bf16 autocast, residual CNN (channels 8,16)"
echo "   (median of $REPEATS alternating pairs of $CNN_SAMPLES samples; load average: $(load))"
PREC=bf16
printf '%-8s %-8s %16s %16s %8s  %s\n' threads batch jizhi-train pytorch ratio range
for th in 1 $([ "$CORES" -gt 1 ] && echo "$CORES"); do
    compare "$th" "$CNN_SAMPLES" "${BF16_B[@]}"
done
PREC=fp32
echo "   goal: >= 1.0x, and jizhi-train bf16 above its fp32 at the same batch and threads (load average after: $(load))"

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
echo "   goal: LARS at 8192 within 2 points of batch 128; SGD at 8192 well short"
