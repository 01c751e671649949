#!/usr/bin/env bash
# bench-bo.sh - runs the bo benchmark (scripts/bench_bo.py) with the C
# driver built by `make bench-bo`. Extra arguments go to bench_bo.py
# (e.g. --seeds 3 --evals 30 --latency 100). Optuna and scikit-optimize are
# used where installed:
#   /usr/bin/python3 -m pip install --break-system-packages "optuna<4.1" \
#       scikit-optimize "scipy<1.14" "scikit-learn<1.6"
# The pins keep Debian's numpy 1.24 (newer scipy pulls numpy 2, which breaks
# Debian's torch 1.13), and Optuna 4.1+ GPSampler needs torch >= 2.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD=${BUILD:-build}
BENCH_BO=${BENCH_BO:-$BUILD/bin/bench_bo}
[ -x "$BENCH_BO" ] || { echo "bench-bo: $BENCH_BO missing (make bench-bo builds it)" >&2; exit 1; }
exec "$PYTHON" scripts/bench_bo.py --driver "$BENCH_BO" --out "$BUILD/bench/bench_bo.json" "$@"
