#!/usr/bin/env bash
# bo.sh - runs the bo benchmark (bench/bench_bo.py) with the C
# driver built by `make bench-bo`. Extra arguments go to bench_bo.py
# (e.g. --seeds 3 --evals 30 --latency 100). Optuna and scikit-optimize are
# installed with pip when missing (bench/peers-install.sh, which
# holds the pins); where that fails, those peers are skipped.
# `bo.sh large [ARGS]` (make bench-bo-large) runs bench/bo_large.py instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD=${BUILD:-build}
BENCH_BO=${BENCH_BO:-$BUILD/bin/bench_bo}
[ -x "$BENCH_BO" ] || { echo "bench-bo: $BENCH_BO missing (make bench-bo builds it)" >&2; exit 1; }
# `bo.sh large ...`: bo past 1 000 finished trials against the exact GP,
# tpe and cmaes (bench/bo_large.py; jizhi alone, no peers to install)
if [ "${1:-}" = large ]; then
    shift
    exec "$PYTHON" bench/bo_large.py --driver "$BENCH_BO" --out "$BUILD/bench/bo_large.json" "$@"
fi
bench/peers-install.sh
exec "$PYTHON" bench/bench_bo.py --driver "$BENCH_BO" --out "$BUILD/bench/bench_bo.json" "$@"
