#!/usr/bin/env bash
# gpu-check.sh - one command for a machine with an NVIDIA GPU:
#   1. builds jizhi-train (CPU) and jizhi-train-cuda (`make cuda`);
#   2. correctness: the same short Fashion-MNIST run (MLP 784-256-256-10,
#      batch 128, 200 steps of SGD, same seed, same data order) on the CPU
#      backend and on the CUDA backend, in fp32, bf16 and fp16; the
#      validation loss and accuracy must agree within a stated tolerance:
#        fp32: |dloss| <= 1e-3 * loss and |dacc| <= 0.005
#              (cuBLAS pedantic fp32 vs OpenBLAS: only summation order differs)
#        bf16/fp16: |dloss| <= 0.03 * loss and |dacc| <= 0.02
#              (the CPU emulates the rounding; GEMM accumulation order and the
#               point where the bias is added before rounding differ)
#   3. the NCCL backend of the comm layer (--comm nccl, jizhi-train-cuda):
#      one rank through the fusion buckets and ncclAllReduce must equal the
#      local path (val_loss within 1e-5 relative); dense vs compressed on the
#      same path (top-k 1 % with error feedback: val_acc within 0.05 of
#      dense); with 2 or more GPUs and mpirun, 2 NCCL ranks equal 1 rank
#      (1e-5) and bf16 wire stays within 0.02 val_acc;
#   4. speed: samples/s of jizhi-train-cuda and of PyTorch on the same GPU
#      (same MLP, data resident on the device for PyTorch, fp32 and bf16
#      autocast), batch 128, 1024 and 8192, and the ratio.
# Exit status 0 when every comparison is within tolerance.
# Environment: BUILD (build), PYTHON (/usr/bin/python3), STEPS (200).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-200}
CPU=$BUILD/bin/jizhi-train
GPU=$BUILD/bin/jizhi-train-cuda

echo "== build"
make -s -j"$(nproc)" "$CPU" cuda
command -v nvidia-smi >/dev/null && nvidia-smi -L || true

COMMON=(--dataset fashion-mnist --train-subset 20000 --val-size 5000 --hidden 256,256
        --batch-size 128 --lr 0.05 --max-steps "$STEPS" --epochs 100 --log-every 50
        --eval-every "$STEPS" --seed 3 --quiet)

metric() { # name < stderr
    sed -n "s/^jizhi: step [0-9]* $1=//p" | tail -1
}

status=0
echo
echo "== CPU vs CUDA: $STEPS steps, batch 128, same seed"
printf '%-6s %12s %12s %10s %10s %s\n' prec cpu_loss cuda_loss cpu_acc cuda_acc verdict
for prec in fp32 bf16 fp16; do
    c=$(env -u JIZHI_TRIAL "$CPU" "${COMMON[@]}" --precision "$prec" 2>&1)
    g=$(env -u JIZHI_TRIAL "$GPU" "${COMMON[@]}" --precision "$prec" --backend cuda 2>&1) || {
        echo "$g" | tail -5; status=1; continue; }
    cl=$(echo "$c" | metric val_loss); gl=$(echo "$g" | metric val_loss)
    ca=$(echo "$c" | metric val_acc); ga=$(echo "$g" | metric val_acc)
    if [ "$prec" = fp32 ]; then rt=0.001; at=0.005; else rt=0.03; at=0.02; fi
    ok=$("$PYTHON" -c "import sys; cl,gl,ca,ga,rt,at=map(float,sys.argv[1:]); \
print('ok' if abs(cl-gl)<=rt*abs(cl) and abs(ca-ga)<=at else 'FAIL')" "$cl" "$gl" "$ca" "$ga" "$rt" "$at")
    printf '%-6s %12.6f %12.6f %10.4f %10.4f %s (tol loss %s rel, acc %s)\n' \
        "$prec" "$cl" "$gl" "$ca" "$ga" "$ok" "$rt" "$at"
    [ "$ok" = ok ] || status=1
done

echo
echo "== NCCL comm layer (--comm nccl: gradients through fusion buckets and NCCL)"
close() { # a b rel_tol -> ok|FAIL
    "$PYTHON" -c "import sys; a,b,t=map(float,sys.argv[1:]); \
print('ok' if abs(a-b)<=t*max(abs(a),abs(b)) else 'FAIL')" "$1" "$2" "$3"
}
near() { # a b abs_tol -> ok|FAIL
    "$PYTHON" -c "import sys; a,b,t=map(float,sys.argv[1:]); print('ok' if abs(a-b)<=t else 'FAIL')" \
        "$1" "$2" "$3"
}
loc=$(env -u JIZHI_TRIAL "$CPU" "${COMMON[@]}" 2>&1)
one=$(env -u JIZHI_TRIAL "$GPU" "${COMMON[@]}" --comm nccl --allreduce native --fusion-kb 64 2>&1) || {
    echo "$one" | tail -5; status=1; }
ll=$(echo "$loc" | metric val_loss); nl=$(echo "$one" | metric val_loss)
v=$(close "$ll" "${nl:-nan}" 1e-5); [ "$v" = ok ] || status=1
printf '1 rank nccl vs local: val_loss %s vs %s: %s (tol 1e-5 rel)\n' "$nl" "$ll" "$v"
tk=$(env -u JIZHI_TRIAL "$GPU" "${COMMON[@]}" --comm nccl --topk 0.01 --fusion-kb 64 2>&1) || {
    echo "$tk" | tail -5; status=1; }
da=$(echo "$one" | metric val_acc); ta=$(echo "$tk" | metric val_acc)
v=$(near "${da:-0}" "${ta:-0}" 0.05); [ "$v" = ok ] || status=1
printf '1 rank nccl dense vs top-k 1%% EF: val_acc %s vs %s: %s (tol 0.05)\n' "$da" "$ta" "$v"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ] && command -v mpirun >/dev/null; then
    MPI=(mpirun --oversubscribe -np 2 -x OMPI_ALLOW_RUN_AS_ROOT=1 -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    two=$(env -u JIZHI_TRIAL "${MPI[@]}" "$GPU" "${COMMON[@]}" --comm nccl 2>&1) || {
        echo "$two" | tail -5; status=1; }
    tl=$(echo "$two" | metric val_loss)
    v=$(close "$ll" "${tl:-nan}" 1e-5); [ "$v" = ok ] || status=1
    printf '2 ranks nccl ring vs 1 rank: val_loss %s vs %s: %s (tol 1e-5 rel)\n' "$tl" "$ll" "$v"
    bf=$(env -u JIZHI_TRIAL "${MPI[@]}" "$GPU" "${COMMON[@]}" --comm nccl --wire bf16 2>&1) || {
        echo "$bf" | tail -5; status=1; }
    ba=$(echo "$bf" | metric val_acc); la=$(echo "$loc" | metric val_acc)
    v=$(near "$la" "${ba:-0}" 0.02); [ "$v" = ok ] || status=1
    printf '2 ranks nccl bf16 wire vs dense 1 rank: val_acc %s vs %s: %s (tol 0.02)\n' "$ba" "$la" "$v"
else
    echo "2 NCCL ranks: SKIPPED (needs 2 GPUs and mpirun; found $ngpu GPU(s))"
fi

echo
echo "== speed on the GPU: MLP 784-256-256-10, samples/s"
printf '%-6s %-6s %14s %14s %8s\n' batch prec jizhi-cuda pytorch ratio
for b in 128 1024 8192; do
    steps=$(( 2000000 / b )); [ "$steps" -lt 100 ] && steps=100
    for prec in fp32 bf16; do
        o=$(env -u JIZHI_TRIAL "$GPU" --backend cuda --hidden 256,256 --batch-size "$b" \
            --precision "$prec" --max-steps "$steps" --epochs 100000 --log-every $((steps / 5)) \
            --quiet 2>&1 | sed -n 's/^jizhi: step [0-9]* samples_per_s=//p' | tail -n +2 |
            sort -g | tail -1)
        p=$("$PYTHON" scripts/bench_train_torch.py --device cuda --batch-size "$b" \
            --precision "$prec" --steps "$steps" --warmup-steps 50 |
            "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])')
        printf '%-6s %-6s %14.0f %14.0f %7.2fx\n' "$b" "$prec" "${o:-0}" "$p" \
            "$("$PYTHON" -c "print(${o:-0}/$p)")"
    done
done
exit $status
